//! The backup's data sessions: a small MySQL client, over TCP or TLS, that reads a result set's
//! rows straight out of its read buffer.
//!
//! mysql_async turns every row into a `Row` with one allocation per field, and reads the socket
//! 8 KiB at a time; in a backup that was a third of the agent's CPU (docs/benchmarks.md, run
//! 21). A backup's workers only run a few statements and stream text rows, so they speak the
//! protocol themselves: the packet framing and the text rows here, the handshake and the
//! password scrambles from mysql_common (mysql_async's own protocol crate). Everything else
//! (the catalog, the snapshot's coordinator, restores) stays on mysql_async.
//!
//! What the sessions support is what the agent's mysql_async connections do: plain TCP or TLS
//! (the SSLRequest after the server's greeting, then the rest of the login over TLS), the
//! `mysql_native_password` and `caching_sha2_password` plugins (a full `caching_sha2_password`
//! exchange sends the password over TLS as is, and encrypts it with the server's RSA key over
//! plain TCP), and an authentication switch between them.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use mysql_common::constants::CapabilityFlags;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthPlugin, AuthSwitchRequest, ErrPacket, HandshakePacket, HandshakeResponse, SslRequest};
use mysql_common::proto::MySerialize;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// What can go wrong in a data session.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed")]
    Closed,
    #[error("error {code}: {message}")]
    Server { code: u16, message: String },
    #[error("the server asks for the authentication plugin {0}, which the agent does not support")]
    UnsupportedAuthPlugin(String),
    #[error("unexpected reply from the server: {0}")]
    Protocol(String),
    #[error("the server does not offer TLS")]
    TlsNotOffered,
    #[error("the TLS handshake failed: {0}")]
    Tls(rustls::Error),
    #[error("'{0}' is neither a DNS name nor an IP address, so no certificate can name it")]
    TlsServerName(String),
}

type Result<T> = std::result::Result<T, WireError>;

/// The largest payload of one packet; a longer one continues in the next packets.
const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// A socket read asks for at least this much room.
const READ_BYTES: usize = 256 * 1024;
/// The `max_allowed_packet` the client announces (the server's own limit still applies).
const MAX_PACKET: u32 = 1024 * 1024 * 1024;

const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;

fn client_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_LONG_FLAG
        | CapabilityFlags::CLIENT_TRANSACTIONS
        | CapabilityFlags::CLIENT_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
}

/// The connection under a session. TLS is boxed once per session, not per read.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Only while the plain stream is being upgraded.
    Upgrading,
}

impl Stream {
    async fn read_buf(&mut self, buffer: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.read_buf(buffer).await,
            Stream::Tls(stream) => stream.read_buf(buffer).await,
            Stream::Upgrading => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.write_all(bytes).await,
            // rustls may keep the last record until flushed.
            Stream::Tls(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
            Stream::Upgrading => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.shutdown().await,
            Stream::Tls(stream) => stream.shutdown().await,
            Stream::Upgrading => Ok(()),
        }
    }
}

/// Where and how a session logs in.
pub struct Login<'a> {
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    /// `None` for an account without one.
    pub password: Option<&'a str>,
    /// TLS, or `None` for plain text.
    pub tls: Option<Arc<ClientConfig>>,
}

/// One session.
pub struct DataConn {
    stream: Stream,
    buffer: BytesMut,
    /// Bytes at the front of `buffer` that belong to the packet last returned.
    consumed: usize,
    /// A payload longer than one packet, put together.
    joined: Vec<u8>,
    /// The sequence number the next packet must have.
    sequence: u8,
    capabilities: CapabilityFlags,
}

impl DataConn {
    /// Connects and logs in.
    pub async fn connect(login: Login<'_>) -> Result<Self> {
        let stream = TcpStream::connect((login.host, login.port)).await?;
        stream.set_nodelay(true)?;
        let mut conn = Self {
            stream: Stream::Plain(stream),
            buffer: BytesMut::with_capacity(READ_BYTES),
            consumed: 0,
            joined: Vec::new(),
            sequence: 0,
            capabilities: CapabilityFlags::empty(),
        };
        conn.log_in(login).await?;
        Ok(conn)
    }

    async fn log_in(&mut self, login: Login<'_>) -> Result<()> {
        let greeting = self.packet().await?.to_vec();
        if greeting.first() == Some(&0xFF) {
            return Err(server_error(&greeting, CapabilityFlags::empty()));
        }
        let handshake = ParseBuf(&greeting).parse::<HandshakePacket>(()).map_err(protocol)?;
        if !handshake.capabilities().contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
            return Err(WireError::Protocol("the server predates MySQL 4.1's protocol".into()));
        }
        self.capabilities = handshake.capabilities() & client_capabilities();
        if login.tls.is_some() {
            if !handshake.capabilities().contains(CapabilityFlags::CLIENT_SSL) {
                return Err(WireError::TlsNotOffered);
            }
            self.capabilities |= CapabilityFlags::CLIENT_SSL;
        }
        let mut nonce = handshake.scramble_1_ref().to_vec();
        nonce.extend_from_slice(handshake.scramble_2_ref().unwrap_or_default());
        nonce.resize(20, 0);
        let version = handshake
            .maria_db_server_version_parsed()
            .or_else(|| handshake.server_version_parsed())
            .unwrap_or((0, 0, 0));
        let plugin = match handshake.auth_plugin() {
            Some(AuthPlugin::CachingSha2Password) => AuthPlugin::CachingSha2Password,
            _ => AuthPlugin::MysqlNativePassword,
        };
        let scramble = plugin.gen_data(login.password, &nonce);
        let response = HandshakeResponse::new(
            scramble.as_deref().map(Cow::Borrowed),
            version,
            Some(login.user.as_bytes()),
            None::<&[u8]>,
            Some(plugin.clone()),
            self.capabilities,
            None,
            MAX_PACKET,
        );
        let secure = login.tls.is_some();
        if let Some(config) = login.tls {
            let request = SslRequest::new(self.capabilities, MAX_PACKET, response.collation());
            let mut payload = Vec::new();
            request.serialize(&mut payload);
            self.write_packet(&payload).await?;
            self.start_tls(login.host, config).await?;
        }
        let mut payload = Vec::new();
        response.serialize(&mut payload);
        self.write_packet(&payload).await?;
        Authentication { plugin, nonce, password: login.password, switched: false, secure }.complete(self).await
    }

    /// Upgrades the connection after the SSLRequest; the login goes on over TLS with the next
    /// sequence number.
    async fn start_tls(&mut self, host: &str, config: Arc<ClientConfig>) -> Result<()> {
        self.buffer.advance(std::mem::take(&mut self.consumed));
        if !self.buffer.is_empty() {
            return Err(protocol("data before the TLS handshake"));
        }
        let name = ServerName::try_from(host).map_err(|_| WireError::TlsServerName(host.into()))?.to_owned();
        let Stream::Plain(plain) = std::mem::replace(&mut self.stream, Stream::Upgrading) else {
            return Err(protocol("TLS started twice"));
        };
        let secured = TlsConnector::from(config).connect(name, plain).await.map_err(tls_error)?;
        self.stream = Stream::Tls(Box::new(secured));
        Ok(())
    }

    /// Runs a statement and reads whatever it returns.
    pub async fn execute(&mut self, sql: &str) -> Result<()> {
        let mut rows = self.query(sql).await?;
        while rows.next().await?.is_some() {}
        Ok(())
    }

    /// The first row of a statement's result, each field as text (`None` for NULL).
    pub async fn query_first(&mut self, sql: &str) -> Result<Option<Vec<Option<Vec<u8>>>>> {
        let mut rows = self.query(sql).await?;
        let mut first = None;
        while let Some(row) = rows.next().await? {
            if first.is_none() {
                first = Some(
                    row.fields().map(|field| field.map(|value| value.map(<[u8]>::to_vec))).collect::<Result<_>>()?,
                );
            }
        }
        Ok(first)
    }

    /// Sends a statement; its rows are read from the returned [`Rows`], to the end, before the
    /// session is used again.
    pub async fn query(&mut self, sql: &str) -> Result<Rows<'_>> {
        self.sequence = 0;
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(COM_QUERY);
        payload.extend_from_slice(sql.as_bytes());
        self.write_packet(&payload).await?;
        let columns = self.result_header().await?;
        Ok(Rows { conn: self, columns })
    }

    /// Ends the session politely.
    pub async fn disconnect(mut self) {
        self.sequence = 0;
        let _ = self.write_packet(&[COM_QUIT]).await;
        let _ = self.stream.shutdown().await;
    }

    /// Reads the start of a statement's result: the number of columns of its rows, after their
    /// definitions, or 0 for a statement without rows.
    async fn result_header(&mut self) -> Result<usize> {
        loop {
            let capabilities = self.capabilities;
            let payload = self.packet().await?;
            match payload.first() {
                Some(0x00) => {
                    if ok_status(payload)? & SERVER_MORE_RESULTS_EXISTS == 0 {
                        return Ok(0);
                    }
                }
                Some(0xFF) => return Err(server_error(payload, capabilities)),
                Some(0xFB) => return Err(WireError::Protocol("the server asked for a local file".into())),
                Some(_) => {
                    let columns = Fields { rest: payload }.length()?;
                    let columns = usize::try_from(columns).map_err(|_| protocol("column count"))?;
                    for _ in 0..columns {
                        self.packet().await?;
                    }
                    self.end_of_definitions().await?;
                    return Ok(columns.max(1));
                }
                None => return Err(protocol("an empty packet")),
            }
        }
    }

    async fn end_of_definitions(&mut self) -> Result<()> {
        let payload = self.packet().await?;
        if is_eof(payload) { Ok(()) } else { Err(protocol("no end after the column definitions")) }
    }

    /// The next packet's payload, valid until the next call.
    async fn packet(&mut self) -> Result<&[u8]> {
        self.buffer.advance(std::mem::take(&mut self.consumed));
        let length = self.frame().await?;
        if length < MAX_PAYLOAD {
            self.consumed = 4 + length;
            return Ok(&self.buffer[4..4 + length]);
        }
        self.joined.clear();
        let mut length = length;
        loop {
            self.joined.extend_from_slice(&self.buffer[4..4 + length]);
            self.buffer.advance(4 + length);
            if length < MAX_PAYLOAD {
                return Ok(&self.joined);
            }
            length = self.frame().await?;
        }
    }

    /// Waits until a whole packet is at the front of the buffer; its payload's length.
    async fn frame(&mut self) -> Result<usize> {
        loop {
            if let [a, b, c, sequence, ..] = self.buffer[..] {
                let length = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
                if self.buffer.len() >= 4 + length {
                    if sequence != self.sequence {
                        return Err(WireError::Protocol(format!(
                            "packet {sequence} where {} was expected",
                            self.sequence
                        )));
                    }
                    self.sequence = self.sequence.wrapping_add(1);
                    return Ok(length);
                }
                self.buffer.reserve(4 + length - self.buffer.len());
            }
            self.fill().await?;
        }
    }

    async fn fill(&mut self) -> Result<()> {
        if self.buffer.capacity() - self.buffer.len() < READ_BYTES / 4 {
            self.buffer.reserve(READ_BYTES);
        }
        match self.stream.read_buf(&mut self.buffer).await? {
            0 => Err(WireError::Closed),
            _ => Ok(()),
        }
    }

    async fn write_packet(&mut self, payload: &[u8]) -> Result<()> {
        let mut framed = Vec::with_capacity(payload.len() + 4 * (payload.len() / MAX_PAYLOAD + 1));
        let mut rest = payload;
        // A piece shorter than the maximum ends the payload, so one of the maximum's length
        // is followed by another, empty if need be.
        loop {
            let (piece, after) = rest.split_at(rest.len().min(MAX_PAYLOAD));
            self.frame_into(&mut framed, piece);
            rest = after;
            if piece.len() < MAX_PAYLOAD {
                break;
            }
        }
        self.stream.write_all(&framed).await?;
        Ok(())
    }

    fn frame_into(&mut self, framed: &mut Vec<u8>, piece: &[u8]) {
        let length = piece.len() as u32;
        framed.extend_from_slice(&length.to_le_bytes()[..3]);
        framed.push(self.sequence);
        framed.extend_from_slice(piece);
        self.sequence = self.sequence.wrapping_add(1);
    }
}

/// The rows of one statement.
pub struct Rows<'a> {
    conn: &'a mut DataConn,
    /// Fields per row; 0 once the result has ended.
    columns: usize,
}

impl Rows<'_> {
    /// The next row, valid until the next call; `None` at the end of the result.
    pub async fn next(&mut self) -> Result<Option<TextRow<'_>>> {
        if self.columns == 0 {
            return Ok(None);
        }
        match self.conn.result_packet().await {
            Ok(ResultPacket::Row) => Ok(Some(TextRow { payload: self.conn.last_payload(), columns: self.columns })),
            Ok(ResultPacket::End { more_results }) => {
                self.columns = 0;
                if more_results {
                    self.drain_further_results().await?;
                }
                Ok(None)
            }
            Err(error) => {
                self.columns = 0;
                Err(error)
            }
        }
    }

    /// Further results of a multi-result statement (a procedure's): read and dropped.
    async fn drain_further_results(&mut self) -> Result<()> {
        loop {
            if self.conn.result_header().await? == 0 {
                return Ok(());
            }
            loop {
                match self.conn.result_packet().await? {
                    ResultPacket::Row => {}
                    ResultPacket::End { more_results: false } => return Ok(()),
                    ResultPacket::End { more_results: true } => break,
                }
            }
        }
    }
}

/// What the next packet of a result's rows is.
enum ResultPacket {
    /// A row, in [`DataConn::last_payload`].
    Row,
    /// The end of this result, and whether another follows.
    End { more_results: bool },
}

impl DataConn {
    /// Reads the next packet of a result's rows; a server error raised mid-result is an error.
    async fn result_packet(&mut self) -> Result<ResultPacket> {
        let capabilities = self.capabilities;
        let payload = self.packet().await?;
        if is_eof(payload) {
            return Ok(ResultPacket::End { more_results: eof_status(payload) & SERVER_MORE_RESULTS_EXISTS != 0 });
        }
        if payload.first() == Some(&0xFF) {
            return Err(server_error(payload, capabilities));
        }
        Ok(ResultPacket::Row)
    }

    /// The payload [`DataConn::packet`] returned last.
    fn last_payload(&self) -> &[u8] {
        if self.consumed > 0 { &self.buffer[4..self.consumed] } else { &self.joined }
    }
}

/// One row of a text result: each field is the value's text, or NULL.
pub struct TextRow<'a> {
    payload: &'a [u8],
    columns: usize,
}

impl<'a> TextRow<'a> {
    /// The fields in column order; an error if the row is cut short or has more fields.
    pub fn fields(&self) -> impl Iterator<Item = Result<Option<&'a [u8]>>> + '_ {
        let mut fields = Fields { rest: self.payload };
        let mut left = self.columns;
        std::iter::from_fn(move || {
            if left == 0 {
                let extra = std::mem::take(&mut fields.rest);
                return (!extra.is_empty()).then(|| Err(protocol("a row with more fields than columns")));
            }
            left -= 1;
            let field = fields.field();
            if field.is_err() {
                (left, fields.rest) = (0, &[]);
            }
            Some(field)
        })
    }
}

/// A reader of length-encoded values.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<Option<&'a [u8]>> {
        if self.rest.first() == Some(&0xFB) {
            self.rest = &self.rest[1..];
            return Ok(None);
        }
        let length = usize::try_from(self.length()?).map_err(|_| protocol("field length"))?;
        if self.rest.len() < length {
            return Err(protocol("a row cut short"));
        }
        let (value, rest) = self.rest.split_at(length);
        self.rest = rest;
        Ok(Some(value))
    }

    /// A length-encoded integer.
    fn length(&mut self) -> Result<u64> {
        let (&first, rest) = self.rest.split_first().ok_or_else(|| protocol("a row cut short"))?;
        let width = match first {
            0xFC => 2,
            0xFD => 3,
            0xFE => 8,
            0xFB | 0xFF => return Err(protocol("a length")),
            small => {
                self.rest = rest;
                return Ok(u64::from(small));
            }
        };
        if rest.len() < width {
            return Err(protocol("a row cut short"));
        }
        let mut bytes = [0u8; 8];
        bytes[..width].copy_from_slice(&rest[..width]);
        self.rest = &rest[width..];
        Ok(u64::from_le_bytes(bytes))
    }
}

/// An EOF packet (protocol 4.1: `0xFE`, warnings, status), told apart from a row whose first
/// field is 16 MiB or longer by its length.
fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xFE) && payload.len() < 9
}

fn eof_status(payload: &[u8]) -> u16 {
    match payload {
        [_, _, _, low, high, ..] => u16::from_le_bytes([*low, *high]),
        _ => 0,
    }
}

/// The status flags of an OK packet.
fn ok_status(payload: &[u8]) -> Result<u16> {
    let mut fields = Fields { rest: &payload[1..] };
    fields.length()?; // affected rows
    fields.length()?; // last insert id
    match fields.rest {
        [low, high, ..] => Ok(u16::from_le_bytes([*low, *high])),
        _ => Err(protocol("an OK packet cut short")),
    }
}

fn server_error(payload: &[u8], capabilities: CapabilityFlags) -> WireError {
    match ParseBuf(payload).parse::<ErrPacket>(capabilities) {
        Ok(ErrPacket::Error(error)) => {
            WireError::Server { code: error.error_code(), message: error.message_str().into_owned() }
        }
        Ok(ErrPacket::Progress(_)) => protocol("a progress report"),
        Err(error) => protocol(error),
    }
}

/// A handshake's error: rustls's own when it is one (tokio-rustls wraps them in `io::Error`).
fn tls_error(error: std::io::Error) -> WireError {
    match super::tls::rustls_error(&error) {
        Some(tls) => WireError::Tls(tls.clone()),
        None => WireError::Io(error),
    }
}

fn protocol(what: impl std::fmt::Display) -> WireError {
    WireError::Protocol(what.to_string())
}

/// The login's exchange after the handshake response.
struct Authentication<'p> {
    plugin: AuthPlugin<'static>,
    nonce: Vec<u8>,
    password: Option<&'p str>,
    switched: bool,
    /// Over TLS, where a full `caching_sha2_password` login sends the password as is.
    secure: bool,
}

/// `caching_sha2_password`'s replies after the scramble.
const FAST_AUTH_OK: u8 = 0x03;
const FULL_AUTH_NEEDED: u8 = 0x04;
const REQUEST_PUBLIC_KEY: u8 = 0x02;

impl Authentication<'_> {
    async fn complete(mut self, conn: &mut DataConn) -> Result<()> {
        loop {
            let reply = conn.packet().await?.to_vec();
            match reply.first() {
                Some(0x00) => return Ok(()),
                Some(0xFF) => return Err(server_error(&reply, conn.capabilities)),
                Some(0xFE) if !self.switched => self.switch(conn, &reply).await?,
                Some(0x01) if matches!(self.plugin, AuthPlugin::CachingSha2Password) => match reply.get(1) {
                    Some(&FAST_AUTH_OK) => {}
                    Some(&FULL_AUTH_NEEDED) if self.secure => self.send_password_in_tls(conn).await?,
                    Some(&FULL_AUTH_NEEDED) => self.send_password_encrypted(conn).await?,
                    _ => return Err(protocol("caching_sha2_password: unknown step")),
                },
                _ => return Err(protocol("a login reply")),
            }
        }
    }

    /// The server asked for another plugin, with a fresh nonce.
    async fn switch(&mut self, conn: &mut DataConn, reply: &[u8]) -> Result<()> {
        self.switched = true;
        let request = ParseBuf(reply).parse::<AuthSwitchRequest>(()).map_err(protocol)?;
        self.plugin = match request.auth_plugin() {
            AuthPlugin::MysqlNativePassword => AuthPlugin::MysqlNativePassword,
            AuthPlugin::CachingSha2Password => AuthPlugin::CachingSha2Password,
            other => {
                let name = String::from_utf8_lossy(other.as_bytes()).into_owned();
                return Err(WireError::UnsupportedAuthPlugin(name));
            }
        };
        self.nonce = request.plugin_data().to_vec();
        let mut payload = Vec::new();
        if let Some(data) = self.plugin.gen_data(self.password, &self.nonce) {
            data.serialize(&mut payload);
        }
        conn.write_packet(&payload).await
    }

    /// A full `caching_sha2_password` login over TLS: the password, NUL-terminated.
    async fn send_password_in_tls(&self, conn: &mut DataConn) -> Result<()> {
        let secret: Vec<u8> = self.password.unwrap_or_default().bytes().chain([0]).collect();
        conn.write_packet(&secret).await
    }

    /// A full `caching_sha2_password` login over plain TCP: the password, XORed with the nonce,
    /// encrypted with the server's public key.
    async fn send_password_encrypted(&self, conn: &mut DataConn) -> Result<()> {
        conn.write_packet(&[REQUEST_PUBLIC_KEY]).await?;
        let key = conn.packet().await?;
        let key = key.strip_prefix(&[0x01]).ok_or_else(|| protocol("no public key"))?.to_vec();
        let mut secret: Vec<u8> = self.password.unwrap_or_default().bytes().chain([0]).collect();
        for (i, byte) in secret.iter_mut().enumerate() {
            *byte ^= self.nonce[i % self.nonce.len()];
        }
        let encrypted = mysql_common::crypto::encrypt(&secret, &key);
        conn.write_packet(&encrypted).await
    }
}

#[cfg(test)]
mod tests {
    use mysql_common::constants::StatusFlags;
    use tokio::net::TcpListener;

    use super::*;

    fn lenenc(out: &mut Vec<u8>, value: &[u8]) {
        match value.len() {
            n if n < 0xFB => out.push(n as u8),
            n if n < 0x1_0000 => {
                out.push(0xFC);
                out.extend_from_slice(&(n as u16).to_le_bytes());
            }
            n if n < 0x100_0000 => {
                out.push(0xFD);
                out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
            }
            n => {
                out.push(0xFE);
                out.extend_from_slice(&(n as u64).to_le_bytes());
            }
        }
        out.extend_from_slice(value);
    }

    fn fields(payload: &[u8], columns: usize) -> Result<Vec<Option<Vec<u8>>>> {
        TextRow { payload, columns }.fields().map(|f| f.map(|v| v.map(<[u8]>::to_vec))).collect()
    }

    #[test]
    fn a_row_reads_nulls_empty_values_and_every_length_encoding() {
        let long = vec![b'x'; 300];
        let longer = vec![b'y'; 70_000];
        let mut payload = Vec::new();
        lenenc(&mut payload, b"a\tb");
        payload.push(0xFB);
        lenenc(&mut payload, b"");
        lenenc(&mut payload, &long);
        lenenc(&mut payload, &longer);
        let row = fields(&payload, 5).unwrap();
        assert_eq!(row, vec![Some(b"a\tb".to_vec()), None, Some(Vec::new()), Some(long), Some(longer)]);
    }

    #[test]
    fn a_row_cut_short_or_too_long_is_an_error() {
        let mut payload = Vec::new();
        lenenc(&mut payload, b"abcdef");
        assert!(fields(&payload[..4], 1).is_err(), "a value cut short");
        assert!(fields(&payload, 2).is_err(), "a missing field");
        assert!(fields(&payload, 0).is_err(), "an extra field");
        assert!(fields(&[0xFC, 0x01], 1).is_err(), "a length cut short");
    }

    #[test]
    fn an_eof_packet_is_told_apart_from_a_row_starting_with_a_long_value() {
        assert!(is_eof(&[0xFE, 0, 0, 0x02, 0]));
        let mut row = vec![0xFE];
        row.extend_from_slice(&(20u64 << 20).to_le_bytes());
        assert!(!is_eof(&row));
        assert_eq!(eof_status(&[0xFE, 0, 0, 0x0A, 0]), 0x0A);
    }

    #[test]
    fn an_ok_packets_status_follows_its_two_lengths() {
        assert_eq!(ok_status(&[0x00, 0xFC, 0x10, 0x27, 0x05, 0x08, 0x00, 0, 0]).unwrap(), 0x0008);
        assert!(ok_status(&[0x00, 0x01]).is_err());
    }

    /// One side of a scripted server: packets with their sequence numbers.
    struct Script {
        stream: TcpStream,
        sequence: u8,
    }

    impl Script {
        async fn send(&mut self, payload: &[u8]) {
            let mut framed = (payload.len() as u32).to_le_bytes()[..3].to_vec();
            framed.push(self.sequence);
            framed.extend_from_slice(payload);
            self.stream.write_all(&framed).await.unwrap();
            self.sequence = self.sequence.wrapping_add(1);
        }

        async fn receive(&mut self) -> Vec<u8> {
            let mut header = [0u8; 4];
            self.stream.read_exact(&mut header).await.unwrap();
            assert_eq!(header[3], self.sequence, "the client's sequence number");
            self.sequence = self.sequence.wrapping_add(1);
            let mut payload =
                vec![0u8; usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16];
            self.stream.read_exact(&mut payload).await.unwrap();
            payload
        }
    }

    const NONCE: [u8; 20] = *b"0123456789abcdefghij";
    const PASSWORD: &str = "s3cret-of-mysql-8";

    /// A MySQL 8 greeting that asks for `caching_sha2_password`.
    fn mysql8_greeting() -> Vec<u8> {
        let mut scramble_2 = NONCE[8..].to_vec();
        scramble_2.push(0);
        let handshake = HandshakePacket::new(
            10,
            &b"8.0.36"[..],
            7,
            NONCE[..8].try_into().unwrap(),
            Some(scramble_2),
            client_capabilities() | CapabilityFlags::CLIENT_SSL,
            255,
            StatusFlags::SERVER_STATUS_AUTOCOMMIT,
            Some(&b"caching_sha2_password"[..]),
        );
        let mut payload = Vec::new();
        handshake.serialize(&mut payload);
        payload
    }

    /// Logs a client in the way MySQL 8 does; with `full`, as for an account not in the
    /// server's cache: the client fetches the public key and sends the password encrypted.
    /// Returns the password the server decrypted, if it did.
    async fn serve_caching_sha2(listener: TcpListener, full: bool, private_key: std::path::PathBuf) -> Option<String> {
        let (stream, _) = listener.accept().await.unwrap();
        let mut script = Script { stream, sequence: 0 };
        script.send(&mysql8_greeting()).await;
        let response = script.receive().await;
        let proof = mysql_common::scramble::scramble_sha256(&NONCE, PASSWORD.as_bytes()).unwrap();
        assert!(response.windows(32).any(|w| w == proof), "the handshake response carries the SHA-256 scramble");
        let mut decrypted = None;
        if full {
            script.send(&[0x01, FULL_AUTH_NEEDED]).await;
            assert_eq!(script.receive().await, [REQUEST_PUBLIC_KEY]);
            let public_key = std::process::Command::new("openssl")
                .args(["rsa", "-pubout", "-in"])
                .arg(&private_key)
                .output()
                .unwrap()
                .stdout;
            script.send(&[&[0x01][..], &public_key].concat()).await;
            let encrypted = script.receive().await;
            let file = private_key.with_file_name("encrypted.bin");
            std::fs::write(&file, encrypted).unwrap();
            let plain = std::process::Command::new("openssl")
                .args(["pkeyutl", "-decrypt", "-pkeyopt", "rsa_padding_mode:oaep", "-inkey"])
                .arg(&private_key)
                .arg("-in")
                .arg(&file)
                .output()
                .unwrap();
            assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
            let clear: Vec<u8> = plain.stdout.iter().enumerate().map(|(i, b)| b ^ NONCE[i % NONCE.len()]).collect();
            decrypted = Some(String::from_utf8(clear.strip_suffix(&[0]).unwrap().to_vec()).unwrap());
        } else {
            script.send(&[0x01, FAST_AUTH_OK]).await;
        }
        script.send(&[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]).await;
        decrypted
    }

    /// No MariaDB offers MySQL 8's default login, so a scripted server plays it; the full
    /// exchange is checked by decrypting what the client sent with `openssl`.
    #[tokio::test]
    async fn a_mysql_8_login_succeeds_from_the_cache_and_with_the_password_encrypted() {
        let Some(_) = visitors_test_support::programs_or_skip(&["openssl"], "VISITORS_REQUIRE_MARIADB") else { return };
        let dir = tempfile::tempdir().unwrap();
        let private_key = dir.path().join("key.pem");
        let generated = std::process::Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&private_key)
            .arg("2048")
            .output()
            .unwrap();
        assert!(generated.status.success());
        for full in [false, true] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = tokio::spawn(serve_caching_sha2(listener, full, private_key.clone()));
            let login = Login { host: "127.0.0.1", port, user: "app", password: Some(PASSWORD), tls: None };
            DataConn::connect(login).await.unwrap();
            let decrypted = server.await.unwrap();
            assert_eq!(decrypted.as_deref(), full.then_some(PASSWORD), "full exchange: {full}");
        }
    }
}
