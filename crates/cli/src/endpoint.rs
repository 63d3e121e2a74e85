//! Where `serve` listens and how a client reaches it: `--listen` parsing,
//! the private default socket directory, TLS options and the printed URI.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A parsed `--listen` address.
#[derive(Debug, PartialEq, Eq)]
pub struct Listen {
    /// The address to bind, without brackets; `None` = every address.
    pub host: Option<String>,
    pub port: u16,
}

impl Listen {
    /// `HOST:PORT`, `[IPV6]:PORT` or `:PORT` (every address).
    pub fn parse(addr: &str) -> Result<Listen> {
        let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
            let (h, p) = rest
                .split_once("]:")
                .with_context(|| format!("--listen {addr}: expected [IPV6]:PORT, e.g. [::1]:10809"))?;
            (Some(h.to_string()), p)
        } else {
            let (h, p) = addr
                .rsplit_once(':')
                .with_context(|| format!("--listen {addr}: expected HOST:PORT, e.g. 127.0.0.1:10809"))?;
            if h.contains(':') {
                bail!("--listen {addr}: put an IPv6 address in brackets, e.g. [{h}]:{p}");
            }
            ((!h.is_empty()).then(|| h.to_string()), p)
        };
        let port = match port.parse::<u32>() {
            Ok(0) => bail!(
                "--listen {addr}: port 0 would let nbdkit pick a port this command cannot print; choose one, e.g. 10809"
            ),
            Ok(n) if n <= u32::from(u16::MAX) => n as u16,
            _ => bail!("--listen {addr}: `{port}` is not a port number (1 to 65535)"),
        };
        Ok(Listen { host, port })
    }

    /// Whether only this machine can connect (loopback addresses only).
    pub fn is_loopback(&self) -> bool {
        use std::net::ToSocketAddrs;
        let Some(host) = &self.host else { return false };
        if host == "localhost" {
            return true;
        }
        match (host.as_str(), self.port).to_socket_addrs() {
            Ok(addrs) => {
                let addrs: Vec<_> = addrs.collect();
                !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
            }
            Err(_) => false,
        }
    }

    /// Binds the address, so a port in use (or an address not on this
    /// machine) is refused before nbdkit opens, and so marks, the volume.
    /// `serve` hands the bound listener to nbdkit (socket activation), so
    /// nothing can take the port in between; with `--run` (where nbdkit binds
    /// the address itself) it is let go first.
    pub fn bind(&self) -> Result<std::net::TcpListener> {
        let host = self.host.as_deref().unwrap_or("::");
        let r = std::net::TcpListener::bind((host, self.port)).or_else(|e| match self.host {
            None => std::net::TcpListener::bind(("0.0.0.0", self.port)),
            Some(_) => Err(e),
        });
        r.map_err(|e| {
            anyhow::anyhow!(
                "--listen {}: cannot listen there: {e}; choose another address or port",
                self.describe()
            )
        })
    }

    /// What the user sees: `127.0.0.1`, `[::1]`, or every address.
    pub fn describe(&self) -> String {
        match &self.host {
            None => format!("every address, port {}", self.port),
            Some(h) if h.contains(':') => format!("[{h}]:{}", self.port),
            Some(h) => format!("{h}:{}", self.port),
        }
    }
}

/// How clients must authenticate.
pub enum Tls {
    Off,
    /// X.509 certificates; `None` = nbdkit's default directory.
    Certificates {
        dir: Option<PathBuf>,
        verify_peer: bool,
    },
    /// Pre-shared keys (`username:hexkey` lines); `user` is the first one.
    Psk {
        file: PathBuf,
        user: String,
    },
}

impl Tls {
    /// Checks the files before nbdkit starts, so a mistake gets one clear line.
    pub fn new(tls: bool, certs: Option<PathBuf>, psk: Option<PathBuf>, verify_peer: bool) -> Result<Tls> {
        if let Some(file) = psk {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("--tls-psk {}: cannot read the key file", file.display()))?;
            let user = text
                .lines()
                .find_map(|l| l.split_once(':').filter(|(u, k)| !u.is_empty() && !k.is_empty()))
                .map(|(u, _)| u.to_string())
                .with_context(|| {
                    format!(
                        "--tls-psk {}: no `username:hexkey` line; create one with `psktool -p {} -u USER`",
                        file.display(),
                        file.display()
                    )
                })?;
            let mode = std::fs::metadata(&file)?.permissions().mode();
            if mode & 0o077 != 0 {
                eprintln!(
                    "layoutd: WARNING: --tls-psk {}: other users can read the keys (mode {:o}); chmod 600 it",
                    file.display(),
                    mode & 0o777
                );
            }
            return Ok(Tls::Psk { file, user });
        }
        if let Some(dir) = &certs {
            for f in ["ca-cert.pem", "server-cert.pem", "server-key.pem"] {
                if !dir.join(f).is_file() {
                    bail!(
                        "--tls-certificates {}: no {f} there (nbdkit needs ca-cert.pem, server-cert.pem and server-key.pem; see nbdkit-tls(1))",
                        dir.display()
                    );
                }
            }
        }
        if tls || certs.is_some() {
            return Ok(Tls::Certificates { dir: certs, verify_peer });
        }
        if verify_peer {
            bail!("--tls-verify-peer needs --tls or --tls-certificates DIR");
        }
        Ok(Tls::Off)
    }

    pub fn is_on(&self) -> bool {
        !matches!(self, Tls::Off)
    }

    /// nbdkit's options for this mode.
    pub fn nbdkit_args(&self) -> Vec<String> {
        match self {
            Tls::Off => vec![],
            Tls::Certificates { dir, verify_peer } => {
                let mut v = vec!["--tls=require".to_string()];
                if let Some(d) = dir {
                    v.push(format!("--tls-certificates={}", d.display()));
                }
                if *verify_peer {
                    v.push("--tls-verify-peer".to_string());
                }
                v
            }
            Tls::Psk { file, .. } => {
                vec!["--tls=require".to_string(), format!("--tls-psk={}", file.display())]
            }
        }
    }

    /// The URI query parameters a libnbd client needs (file paths, never keys).
    fn uri_query(&self) -> Vec<(&'static str, String)> {
        match self {
            Tls::Off | Tls::Certificates { dir: None, .. } => vec![],
            Tls::Certificates { dir: Some(d), .. } => vec![("tls-certificates", d.display().to_string())],
            Tls::Psk { file, .. } => vec![("tls-psk-file", file.display().to_string())],
        }
    }

    /// The URI's `user@` part: the PSK identity (libnbd's TLS username).
    fn uri_user(&self) -> String {
        match self {
            Tls::Psk { user, .. } => format!("{}@", percent_encode(user).replace('/', "%2F")),
            _ => String::new(),
        }
    }
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Percent-encodes everything but RFC 3986 unreserved characters and `/`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(params: &[(&str, String)]) -> String {
    params.iter().map(|(k, v)| format!("{k}={}", percent_encode(v))).collect::<Vec<_>>().join("&")
}

/// The NBD URI of a TCP endpoint (NBD URI spec: `nbd[s]://host:port/`).
pub fn tcp_uri(l: &Listen, tls: &Tls) -> String {
    let scheme = if tls.is_on() { "nbds" } else { "nbd" };
    let host = match &l.host {
        None => "localhost".to_string(),
        Some(h) if h.contains(':') => format!("[{h}]"),
        Some(h) => h.clone(),
    };
    let q = query(&tls.uri_query());
    let q = if q.is_empty() { q } else { format!("?{q}") };
    format!("{scheme}://{}{host}:{}/{q}", tls.uri_user(), l.port)
}

/// The NBD URI of a Unix socket.
pub fn unix_uri(sock: &Path, tls: &Tls) -> String {
    let scheme = if tls.is_on() { "nbds+unix" } else { "nbd+unix" };
    let mut params = vec![("socket", sock.display().to_string())];
    params.extend(tls.uri_query());
    format!("{scheme}://{}/?{}", tls.uri_user(), query(&params))
}

/// The directory for default sockets: `$XDG_RUNTIME_DIR/layoutd`, else
/// `<tmp>/layoutd-<uid>`; created 0700, and used only if it is a real
/// directory owned by this user that nobody else can enter. Otherwise (say
/// another user pre-created it) a fresh private directory is made instead.
pub fn private_runtime_dir() -> Result<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(x) if x.is_absolute() && x.is_dir() => x.join("layoutd"),
        _ => std::env::temp_dir().join(format!("layoutd-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => bail!("{}: cannot create the socket directory: {e}; give --socket PATH", dir.display()),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0 {
        return Ok(dir);
    }
    let fresh = fresh_private_dir()?;
    eprintln!(
        "layoutd: WARNING: {} is not a private directory of yours (owner uid {}, mode {:o}{}); someone may be \
         trying to intercept or block the socket. Using {} instead.",
        dir.display(),
        meta.uid(),
        meta.mode() & 0o7777,
        if meta.file_type().is_symlink() { ", a symbolic link" } else { "" },
        fresh.display()
    );
    Ok(fresh)
}

/// A new 0700 directory with an unpredictable name in the temp dir (mkdtemp).
fn fresh_private_dir() -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let template = std::env::temp_dir().join("layoutd-XXXXXX");
    let mut bytes = template.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: `bytes` is a writable NUL-terminated template, as mkdtemp requires.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        let e = std::io::Error::last_os_error();
        bail!("{}: cannot create a private socket directory: {e}; give --socket PATH", template.display());
    }
    bytes.pop();
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        let l = |s| Listen::parse(s).unwrap();
        assert_eq!(l("127.0.0.1:10809"), Listen { host: Some("127.0.0.1".into()), port: 10809 });
        assert_eq!(l("[::1]:7"), Listen { host: Some("::1".into()), port: 7 });
        assert_eq!(l(":10809"), Listen { host: None, port: 10809 });
        for bad in ["127.0.0.1:99999", "127.0.0.1:0", "::1:80", "nohost", "[::1]80", "h:x"] {
            assert!(Listen::parse(bad).is_err(), "{bad} accepted");
        }
        assert!(
            l("[::1]:7").is_loopback() && l("127.0.0.1:1").is_loopback() && l("localhost:1").is_loopback()
        );
        assert!(!l(":1").is_loopback() && !l("0.0.0.0:1").is_loopback());
    }

    #[test]
    fn uris_are_percent_encoded() {
        let sock = Path::new("/tmp/a b&c?.sock");
        assert_eq!(unix_uri(sock, &Tls::Off), "nbd+unix:///?socket=/tmp/a%20b%26c%3F.sock");
        let l = Listen { host: Some("::1".into()), port: 9 };
        let psk = Tls::Psk { file: "/k/my keys.psk".into(), user: "al ice".into() };
        assert_eq!(tcp_uri(&l, &psk), "nbds://al%20ice@[::1]:9/?tls-psk-file=/k/my%20keys.psk");
    }
}
