//! Who is looking at the console, and whether a form came from it.
//!
//! The console honours the server's bearer tokens: a person signs in with
//! a token once, and the browser keeps it in an `HttpOnly`,
//! `SameSite=Strict` cookie scoped to `/ui` (script cannot read it, and
//! other sites' requests do not carry it). Every request re-checks the
//! token against the configured ones, so nothing is remembered on the
//! server. Reading needs the role the matching API route needs (operator or
//! admin; the operations page, like `/api/system`, admin); actions need the
//! operator role and a CSRF token derived from the cookie with a key drawn
//! when the node starts, so a form can only be posted by a page this node
//! rendered for that cookie. A server without tokens (`--dev`) has no
//! sign-in, and every visitor may act, as on its API.

use axum::http::{header, HeaderMap, HeaderValue};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::server::auth::{Role, Tokens};

/// The cookie that carries the signed-in token (base64url, no padding).
pub const TOKEN_COOKIE: &str = "dwserver_console";

/// The node's key for CSRF tokens.
pub struct CsrfKey([u8; 32]);

impl CsrfKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> CsrfKey {
        let mut key = [0u8; 32];
        // /dev/urandom never blocks once the kernel is seeded; without it
        // the clock and the process id still make the key unguessable from
        // outside the machine for a node's lifetime.
        if std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
            .is_err()
        {
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            key.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        CsrfKey(key)
    }

    /// The CSRF token for a session identity (the cookie's value, or empty
    /// on a server without tokens).
    pub fn token_for(&self, identity: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.0);
        hasher.update(b"dw-ui-csrf\0");
        hasher.update(identity.as_bytes());
        hex(&hasher.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A visitor the console admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    /// The token's role; `None` on a server without tokens.
    pub role: Option<Role>,
    /// The CSRF token its forms carry.
    pub csrf: String,
}

impl Viewer {
    /// Whether this visitor may signal, cancel or terminate.
    pub fn may_act(&self) -> bool {
        matches!(self.role, None | Some(Role::Operator | Role::Admin))
    }

    /// Whether this visitor may see the operator surfaces (`/api/system`'s).
    pub fn may_operate(&self) -> bool {
        matches!(self.role, None | Some(Role::Admin))
    }

    /// The role as shown in the page header.
    pub fn role_name(&self) -> &'static str {
        self.role.map_or("open (no auth)", Role::as_str)
    }
}

/// Why a visitor was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one the server does not know: sign in.
    SignIn,
    /// A token whose role cannot read the console (a worker token).
    Role(Role),
    /// A token bound to namespaces: the console shows every namespace.
    Bound,
}

/// What the console tells a namespace-bound token.
pub const BOUND_TOKEN_REFUSAL: &str = "A token bound to namespaces cannot use the console, which shows every namespace; sign in with an unbound operator or admin token.";

/// The visitor of a request: its token cookie checked against `tokens`.
pub fn viewer(
    tokens: Option<&Tokens>,
    key: &CsrfKey,
    headers: &HeaderMap,
) -> Result<Viewer, Refusal> {
    let Some(tokens) = tokens else {
        return Ok(Viewer {
            role: None,
            csrf: key.token_for(""),
        });
    };
    let Some(cookie) = cookie(headers, TOKEN_COOKIE) else {
        return Err(Refusal::SignIn);
    };
    let caller = decode_token(&cookie)
        .and_then(|token| tokens.caller_of(&token))
        .ok_or(Refusal::SignIn)?;
    let role = caller.role;
    if role == Role::Worker {
        return Err(Refusal::Role(role));
    }
    if caller.namespaces.is_some() {
        return Err(Refusal::Bound);
    }
    Ok(Viewer {
        role: Some(role),
        csrf: key.token_for(&cookie),
    })
}

/// Whether `sent` is the CSRF token of `viewer` (compared in constant time).
pub fn csrf_matches(viewer: &Viewer, sent: &str) -> bool {
    let expected = viewer.csrf.as_bytes();
    let sent = sent.as_bytes();
    expected.len() == sent.len()
        && expected
            .iter()
            .zip(sent)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Whether a state-changing request came from this site: an `Origin`
/// header, when the browser sends one, must name the `Host` it was sent to.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

/// The cookie that keeps `token` signed in.
pub fn sign_in_cookie(token: &str) -> HeaderValue {
    let value = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.as_bytes());
    HeaderValue::from_str(&format!(
        "{TOKEN_COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict"
    ))
    .expect("base64url is a valid header value")
}

/// The header that ends the sign-in.
pub fn sign_out_cookie() -> HeaderValue {
    HeaderValue::from_static("dwserver_console=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn decode_token(cookie: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cookie)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Where to go after signing in: a console path, never another site.
pub fn local_target(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with("/ui")
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(char::is_control) =>
        {
            path.to_owned()
        }
        _ => "/ui/runs".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_cookie_admits_by_the_tokens_role_and_binds_the_csrf_token() {
        let tokens = Tokens::new([
            ("op;1 x".to_owned(), Role::Operator),
            ("wk".to_owned(), Role::Worker),
            ("ad".to_owned(), Role::Admin),
        ]);
        let key = CsrfKey::generate();
        let set = sign_in_cookie("op;1 x");
        let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
        let viewer = viewer(Some(&tokens), &key, &with_cookie(&format!("a=b; {pair}"))).unwrap();
        assert_eq!(viewer.role, Some(Role::Operator));
        assert!(viewer.may_act() && !viewer.may_operate());
        assert!(csrf_matches(&viewer, &viewer.csrf.clone()));
        assert!(!csrf_matches(&viewer, &key.token_for("")));
        assert!(!csrf_matches(&viewer, ""));

        let worker = sign_in_cookie("wk");
        let worker = worker.to_str().unwrap().split(';').next().unwrap();
        assert_eq!(
            super::viewer(Some(&tokens), &key, &with_cookie(worker)),
            Err(Refusal::Role(Role::Worker))
        );
        assert_eq!(
            super::viewer(Some(&tokens), &key, &with_cookie("dwserver_console=bm9wZQ")),
            Err(Refusal::SignIn)
        );
        assert_eq!(
            super::viewer(Some(&tokens), &key, &HeaderMap::new()),
            Err(Refusal::SignIn)
        );
        let open = super::viewer(None, &key, &HeaderMap::new()).unwrap();
        assert!(open.may_act() && open.may_operate());
        // Another node's key makes another token.
        assert_ne!(CsrfKey::generate().token_for(""), open.csrf);
    }

    #[test]
    fn only_console_paths_are_sign_in_targets_and_origins_must_match() {
        assert_eq!(local_target(Some("/ui/run?wf=a")), "/ui/run?wf=a");
        for hostile in [
            "https://evil.example/",
            "//evil.example",
            "/uix\\evil",
            "/api/x",
        ] {
            assert_eq!(local_target(Some(hostile)), "/ui/runs", "{hostile}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
    }
}
