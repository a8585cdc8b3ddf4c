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
        // Constant-time per candidate: a timing difference would tell an
        // attacker how much of a token they have guessed.
        let mut found = None;
        for (token, role) in &self.by_token {
            if constant_time_eq(token.as_bytes(), presented.as_bytes()) {
                found = Some(*role);
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The plane of `method path`.
pub fn plane_of(method: &str, path: &str) -> Plane {
    match path {
        "/api/health" | "/api/ready" | "/api/system/health" => Plane::Probe,
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
