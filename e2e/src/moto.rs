//! A moto S3 server on this host for the e2e scenarios that store backups in S3.

use std::time::Duration;

/// A moto S3 server on this host, where the emulated node's Jobs reach it (skips, saying why,
/// without `moto_server`).
pub struct Moto {
    child: std::process::Child,
    pub port: u16,
    /// The Python beside `moto_server`, which has boto3 (moto's own dependency).
    python: std::path::PathBuf,
}

impl Moto {
    pub fn start() -> Option<Self> {
        let program = visitors_test_support::programs_or_skip(&["moto_server"], "VISITORS_REQUIRE_S3")?.remove(0);
        let port = visitors_test_support::free_port();
        let python = program.with_file_name("python");
        let child = std::process::Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Self { child, port, python };
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
        let response = self.exchange(method, path, "")?;
        response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other(response))
    }

    /// One HTTP/1.1 request with `body`, unsigned; the whole response.
    fn exchange(&self, method: &str, path: &str, body: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    }

    /// From now on moto checks request signatures, against keys it knows (the test's are not).
    pub fn turn_on_authentication(&self) {
        let response = self.exchange("POST", "/moto-api/reset-auth", "0").unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "moto's reset-auth: {response}");
    }

    /// The keys under `prefix` in `bucket` (moto's ListObjectsV2 answer, read for `<Key>`s).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let response = self.exchange("GET", &format!("/{bucket}?list-type=2&prefix={prefix}"), "").unwrap();
        response
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_string()))
            .collect()
    }

    /// The bytes of object `key` in `bucket`, read with the keys that wrote it (moto keeps an
    /// object private to the account that stored it), through boto3.
    pub fn get(&self, bucket: &str, key: &str, access_key_id: &str, secret_access_key: &str) -> Vec<u8> {
        let script = "import sys, boto3\n\
            s3 = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2],\n\
                              aws_secret_access_key=sys.argv[3], region_name='us-east-1')\n\
            sys.stdout.buffer.write(s3.get_object(Bucket=sys.argv[4], Key=sys.argv[5])['Body'].read())\n";
        let out = std::process::Command::new(&self.python)
            .args(["-c", script, &self.endpoint(), access_key_id, secret_access_key, bucket, key])
            .output()
            .expect("moto's python runs");
        assert!(out.status.success(), "GET {key}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    /// Replaces object `key` in `bucket` with `bytes`, as the keys that wrote it (a backup
    /// damaged in storage).
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8], access_key_id: &str, secret_access_key: &str) {
        use std::io::Write;
        let script = "import sys, boto3\n\
            s3 = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2],\n\
                              aws_secret_access_key=sys.argv[3], region_name='us-east-1')\n\
            s3.put_object(Bucket=sys.argv[4], Key=sys.argv[5], Body=sys.stdin.buffer.read())\n";
        let mut put = std::process::Command::new(&self.python)
            .args(["-c", script, &self.endpoint(), access_key_id, secret_access_key, bucket, key])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("moto's python runs");
        put.stdin.take().expect("its input").write_all(bytes).expect("the object's bytes go in");
        let out = put.wait_with_output().expect("moto's python ends");
        assert!(out.status.success(), "PUT {key}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
