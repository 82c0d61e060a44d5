//! A moto S3 server on this host for the e2e scenarios that store backups in S3.

use std::time::Duration;

/// A moto S3 server on this host, where the emulated node's Jobs reach it (skips, saying why,
/// without `moto_server`).
pub struct Moto {
    child: std::process::Child,
    pub port: u16,
}

impl Moto {
    pub fn start() -> Option<Self> {
        let program = visitors_test_support::programs_or_skip(&["moto_server"], "VISITORS_REQUIRE_S3")?.remove(0);
        let port = visitors_test_support::free_port();
        let child = std::process::Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Self { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while moto.request("GET", "/moto-api/").is_err() {
            assert!(std::time::Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(moto)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn request(&self, method: &str, path: &str) -> std::io::Result<u16> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other(response))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// From now on moto checks request signatures, against keys it knows (the test's are not).
    pub fn turn_on_authentication(&self) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "POST /moto-api/reset-auth HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 1\r\nConnection: close\r\n\r\n0",
            self.port
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "moto's reset-auth: {response}");
    }

    /// The keys under `prefix` in `bucket` (moto's ListObjectsV2 answer, read for `<Key>`s).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "GET /{bucket}?list-type=2&prefix={prefix} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_string()))
            .collect()
    }
}

impl Moto {
    /// The bytes of object `key` in `bucket`.
    pub fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(stream, "GET /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", self.port)
            .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let end = response.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP response") + 4;
        assert!(response.starts_with(b"HTTP/1.1 200"), "GET {key}: {}", String::from_utf8_lossy(&response[..end]));
        let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
        let body = response[end..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            return dechunk(&body);
        }
        body
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16).expect("a chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
        body = &body[line_end + 2 + size + 2..];
    }
}
