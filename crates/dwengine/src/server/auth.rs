//! Bearer-token authentication with three roles, configured by environment.
//!
//! `worker` tokens reach the worker plane, `operator` tokens the control
//! plane, `admin` tokens everything (including namespace registration and
//! the operator surfaces under `/api/system`). Cluster discovery accepts any
//! role; health and readiness probes need none. `--dev` runs without auth.
//! Tokens are compared in constant time and never echoed.

use std::collections::HashMap;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Workers: `/api/worker/*`.
    Worker,
    /// Clients and operators: `/api/workflows*`, reading namespaces.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    /// The role's name in configuration and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// The environment variable that lists this role's tokens.
    pub fn variable(self) -> &'static str {
        match self {
            Role::Worker => "DW_AUTH_WORKER_TOKENS",
            Role::Operator => "DW_AUTH_OPERATOR_TOKENS",
            Role::Admin => "DW_AUTH_ADMIN_TOKENS",
        }
    }

    /// Every role.
    pub const ALL: [Role; 3] = [Role::Worker, Role::Operator, Role::Admin];
}

/// Which routes a request is for, as far as auth is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    /// Health and readiness: no token.
    Probe,
    /// `GET /api/cluster/info`: any role.
    Discovery,
    /// `/api/worker/*`.
    Worker,
    /// `/api/workflows*` and reading namespaces.
    Control,
    /// Namespace registration and `/api/system/*`.
    Admin,
    /// `/api/external-payloads/*`: clients and workers both move payloads.
    Payload,
}

impl Plane {
    /// Whether `role` may use this plane.
    pub fn admits(self, role: Role) -> bool {
        match self {
            Plane::Probe | Plane::Discovery => true,
            Plane::Worker => matches!(role, Role::Worker | Role::Admin),
            Plane::Control => matches!(role, Role::Operator | Role::Admin),
            Plane::Admin => role == Role::Admin,
            Plane::Payload => true,
        }
    }
}

/// The configured tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    by_token: HashMap<String, Role>,
}

impl Tokens {
    /// Reads each role's comma-separated tokens through `lookup`; `None`
    /// when no role has one.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<Tokens> {
        let mut by_token = HashMap::new();
        for role in Role::ALL {
            for token in lookup(role.variable()).unwrap_or_default().split(',') {
                let token = token.trim();
                if !token.is_empty() {
                    by_token.insert(token.to_owned(), role);
                }
            }
        }
        (!by_token.is_empty()).then_some(Tokens { by_token })
    }

    /// Tokens given directly (tests).
    pub fn new(tokens: impl IntoIterator<Item = (String, Role)>) -> Tokens {
        Tokens {
            by_token: tokens.into_iter().collect(),
        }
    }

    /// The role of a presented bearer token.
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        // Both sides are compared as SHA-256 digests, every configured
        // token each time, byte by byte without an early exit: the time
        // taken says neither how much of a token was guessed nor how long
        // the configured tokens are.
        let presented = digest(presented);
        let mut found = None;
        for (token, role) in &self.by_token {
            if constant_time_eq(&digest(token), &presented) {
                found = Some(*role);
            }
        }
        found
    }
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` header value: the `Bearer` scheme is
/// matched without regard to case (RFC 7235 §2.1), the token trimmed.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The plane of `method path`.
pub fn plane_of(method: &str, path: &str) -> Plane {
    match path {
        // `/api/system/health` is an operator surface (admin), as documented.
        "/api/health" | "/api/ready" => Plane::Probe,
        "/api/cluster/info" => Plane::Discovery,
        _ if path.starts_with("/api/worker/") => Plane::Worker,
        _ if path.starts_with("/api/external-payloads/") => Plane::Payload,
        _ if path == "/api/namespaces" || path.starts_with("/api/namespaces/") => {
            if method == "GET" {
                Plane::Control
            } else {
                Plane::Admin
            }
        }
        _ if path.starts_with("/api/system/") => Plane::Admin,
        _ => Plane::Control,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }

    #[test]
    fn tokens_of_any_length_compare_by_digest() {
        let tokens = Tokens::new([
            ("short".to_owned(), Role::Worker),
            ("a-much-longer-operator-token".to_owned(), Role::Operator),
        ]);
        assert_eq!(tokens.role_of("short"), Some(Role::Worker));
        assert_eq!(
            tokens.role_of("a-much-longer-operator-token"),
            Some(Role::Operator)
        );
        // Prefixes and extensions of a token are simply other tokens.
        for wrong in ["shor", "shortx", "", "a-much-longer-operator-toke"] {
            assert_eq!(tokens.role_of(wrong), None, "{wrong:?}");
        }
    }

    #[test]
    fn tokens_map_to_roles_and_planes_admit_by_role() {
        let env = HashMap::from([
            ("DW_AUTH_WORKER_TOKENS", "w1, w2"),
            ("DW_AUTH_OPERATOR_TOKENS", "o1"),
            ("DW_AUTH_ADMIN_TOKENS", "a1"),
        ]);
        let tokens = Tokens::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(tokens.role_of("w2"), Some(Role::Worker));
        assert_eq!(tokens.role_of("o1"), Some(Role::Operator));
        assert_eq!(tokens.role_of("a1"), Some(Role::Admin));
        assert_eq!(tokens.role_of("w"), None);
        assert!(Tokens::from_lookup(|_| Some(" , ".into())).is_none());

        assert_eq!(plane_of("GET", "/api/system/health"), Plane::Admin);
        assert_eq!(plane_of("GET", "/api/health"), Plane::Probe);
        assert_eq!(plane_of("POST", "/api/worker/register"), Plane::Worker);
        assert_eq!(plane_of("POST", "/api/workflows"), Plane::Control);
        assert_eq!(plane_of("GET", "/api/namespaces"), Plane::Control);
        assert_eq!(plane_of("POST", "/api/namespaces"), Plane::Admin);
        assert_eq!(plane_of("GET", "/api/system/metrics"), Plane::Admin);
        assert!(Plane::Worker.admits(Role::Worker));
        assert!(!Plane::Worker.admits(Role::Operator));
        assert!(!Plane::Control.admits(Role::Worker));
        assert!(Plane::Control.admits(Role::Admin));
        assert!(!Plane::Admin.admits(Role::Operator));
        assert!(Plane::Discovery.admits(Role::Worker));
        assert_eq!(
            plane_of("POST", "/api/external-payloads/v1"),
            Plane::Payload
        );
        assert!(Plane::Payload.admits(Role::Worker) && Plane::Payload.admits(Role::Operator));
    }
}
