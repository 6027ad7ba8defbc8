//! A bare HTTP/1.1 client for the HTTP API's tests (no client crate needed):
//! GETs on the tokio runtime ([`get`], [`try_get`]) and blocking requests
//! for tests that run no runtime ([`blocking`]). Every request says
//! `Connection: close`; an answer is its status code and its body.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr`: the status code and the body. Panics, naming what
/// failed, if the connection or the answer does.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    exchange(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// `GET path` on `addr`, for servers that may not be up yet: the status code
/// and the body, or `None` if nothing answers within 5 s.
pub async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), exchange(addr, path))
        .await
        .ok()?
        .ok()
}

/// One GET. The body is read up to its Content-Length where the answer has
/// one (a server may keep the connection open anyway: chromedriver does),
/// otherwise to the end of the stream.
async fn exchange(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
        answer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&answer);
        if n == 0 || complete(&text) {
            return status_and_body(&text).ok_or_else(|| format!("no status in {text:?}"));
        }
    }
}

/// Whether `text` holds the whole head and a body of its Content-Length.
fn complete(text: &str) -> bool {
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    length.is_some_and(|len| body.len() >= len)
}

/// The status code and the body of an answer; `None` without a status line.
fn status_and_body(answer: &str) -> Option<(u16, String)> {
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

/// Requests on std's blocking sockets, for `#[test]`s without a runtime.
pub mod blocking {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    /// `method path` on `addr` (`host:port`) with the extra header lines
    /// `headers` and `body`: the status code and the body. Panics if the
    /// connection fails or no whole answer comes within 10 s.
    pub fn request(
        addr: &str,
        method: &str,
        path: &str,
        headers: &[&str],
        body: &str,
    ) -> (u16, String) {
        let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {path}: send: {e}"));
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)
            .unwrap_or_else(|e| panic!("{method} {path}: read: {e}"));
        let answer = String::from_utf8_lossy(&answer);
        super::status_and_body(&answer).unwrap_or_else(|| panic!("no status in {answer:?}"))
    }

    /// `GET path` on `addr` (`host:port`): the status code and the body.
    pub fn get(addr: &str, path: &str) -> (u16, String) {
        request(addr, "GET", path, &[], "")
    }
}
