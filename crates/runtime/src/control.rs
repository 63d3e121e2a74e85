//! The control socket of a served volume: runtime commands
//! ([`layoutd_core::Target::message`], device-mapper's `message`) sent to a
//! running `layoutd serve` from another process (`layoutd message`,
//! `layoutd snapshot create`, ...).
//!
//! Protocol, one exchange per connection on a Unix stream socket: the
//! client sends the message as one line of UTF-8 (at most
//! [`MESSAGE_BYTES_MAX`], ended by `\n` or by closing its write side); the
//! server answers `ok\n` or `error\n`, then the reply or the reason (any
//! number of lines), then closes. The server handles one connection at a
//! time, each with a time limit, so a stuck client cannot hold the volume's
//! commands forever.
//!
//! The socket is created mode 0600 (only its owner may command the volume)
//! next to the NBD socket, which `layoutd serve` already puts in a private
//! directory; an existing file at the path is never replaced.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest message accepted, in bytes.
pub const MESSAGE_BYTES_MAX: usize = 64 << 10;

/// How long one exchange may take on either side.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server does with a message: the target's reply or its refusal.
pub type Handler = dyn Fn(&str) -> Result<String, String> + Send + Sync;

/// A listening control socket; dropping it stops the listener and removes
/// the socket file.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (which must not exist) and answers each message with
    /// `handler`, on a thread of its own.
    pub fn start(path: &Path, handler: Box<Handler>) -> std::io::Result<ControlServer> {
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("layoutd-control".into())
                .spawn(move || accept_loop(&listener, &*handler, &stop))?
        };
        Ok(ControlServer { path: path.to_path_buf(), stop, thread: Some(thread) })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: &UnixListener, handler: &Handler, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = exchange(stream, handler) {
                    eprintln!("layoutd: control socket: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                eprintln!("layoutd: control socket: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn exchange(stream: UnixStream, handler: &Handler) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    let mut line = Vec::new();
    let mut reader = BufReader::new((&stream).take(MESSAGE_BYTES_MAX as u64 + 1));
    reader.read_until(b'\n', &mut line)?;
    let mut out = &stream;
    let answer = if line.len() > MESSAGE_BYTES_MAX {
        // Read what the client still sends (bounded), so it sees the answer
        // rather than a reset connection.
        let _ = std::io::copy(&mut (&stream).take(16 << 20), &mut std::io::sink());
        Err(format!("message longer than {MESSAGE_BYTES_MAX} bytes"))
    } else {
        match std::str::from_utf8(&line).map(str::trim) {
            Err(_) => Err("message is not UTF-8".to_string()),
            Ok("") => Err("empty message".to_string()),
            Ok(text) => handler(text),
        }
    };
    match answer {
        Ok(reply) => write!(out, "ok\n{reply}\n")?,
        Err(why) => write!(out, "error\n{why}\n")?,
    }
    out.flush()
}

/// Sends `text` to the control socket at `path`: `Ok(Ok(reply))`,
/// `Ok(Err(refusal))` from the target, or the connection's own error.
pub fn send(path: &Path, text: &str) -> std::io::Result<Result<String, String>> {
    let mut stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    writeln!(stream, "{}", text.trim())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (status, rest) = answer.split_once('\n').unwrap_or((answer.as_str(), ""));
    let rest = rest.strip_suffix('\n').unwrap_or(rest).to_string();
    match status {
        "ok" => Ok(Ok(rest)),
        "error" => Ok(Err(rest)),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a layoutd control socket (it answered {other:?})"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_gets_the_handlers_reply_or_refusal_and_the_socket_goes_with_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vol.ctl");
        let server = ControlServer::start(
            &path,
            Box::new(|m: &str| {
                if m == "destage" {
                    Ok("destaging 3 dirty segment(s)".into())
                } else {
                    Err(format!("unknown message `{m}`"))
                }
            }),
        )
        .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the owner may command the volume");
        assert_eq!(send(&path, "destage").unwrap(), Ok("destaging 3 dirty segment(s)".into()));
        assert_eq!(send(&path, " plan now ").unwrap(), Err("unknown message `plan now`".into()));
        assert_eq!(send(&path, "").unwrap(), Err("empty message".into()));
        let long = "x".repeat(MESSAGE_BYTES_MAX + 10);
        assert!(send(&path, &long).unwrap().unwrap_err().contains("longer than"));
        // An existing path is never replaced.
        assert!(ControlServer::start(&path, Box::new(|_: &str| Ok(String::new()))).is_err());
        drop(server);
        assert!(!path.exists(), "the socket file is removed with the server");
        assert!(send(&path, "destage").is_err());
    }
}
