//! Bearer-token authentication with three roles, configured by environment.
//!
//! `worker` tokens reach the worker plane, `operator` tokens the control
//! plane, `admin` tokens everything (including namespace registration and
//! the operator surfaces under `/api/system`). Cluster discovery accepts any
//! role; health and readiness probes need none. `--dev` runs without auth.
//! Tokens are compared in constant time and never echoed.
//!
//! A token may be bound to namespaces (`token@namespace` or
//! `token@a|b` in its role's variable): a bound token acts only in those
//! namespaces on the namespace-scoped routes, and its service calls are
//! made as one of them (a body `caller_namespace` outside them is refused).
//! An unbound token acts in any namespace, as before: the single-tenant
//! form. Service-call budgets are keyed by the authenticated caller, the
//! token's [`Caller::token_id`] (and, for a bound token, the namespace it
//! calls as), never by what a request body claims.

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

    /// The role named `name` (as [`Role::as_str`] spells it).
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

/// Parses a comma-separated list of role names (`worker,operator`): every
/// name known, at least one, duplicates kept once.
pub fn parse_roles(list: &str) -> Result<Vec<Role>, String> {
    let known = Role::ALL.map(Role::as_str).join(", ");
    let mut roles = Vec::new();
    for name in list.split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        match Role::parse(name) {
            Some(role) if !roles.contains(&role) => roles.push(role),
            Some(_) => {}
            None => {
                return Err(format!(
                    "unknown role {name:?}: expected a comma-separated list of {known}"
                ))
            }
        }
    }
    if roles.is_empty() {
        return Err(format!(
            "no role named: expected a comma-separated list of {known} (to turn uploads off, set the threshold to 0)"
        ));
    }
    Ok(roles)
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
    /// `/api/bridge-adapters/webhook/*`: no bearer token; each delivery is
    /// signed with its webhook's secret (`server::webhooks`).
    Webhook,
}

impl Plane {
    /// Whether `role` may use this plane.
    pub fn admits(self, role: Role) -> bool {
        match self {
            Plane::Probe | Plane::Discovery | Plane::Webhook => true,
            Plane::Worker => matches!(role, Role::Worker | Role::Admin),
            Plane::Control => matches!(role, Role::Operator | Role::Admin),
            Plane::Admin => role == Role::Admin,
            Plane::Payload => true,
        }
    }
}

/// The separator of a token's namespace binding (`token@namespace`).
pub const BINDING_SEPARATOR: char = '@';
/// The separator of a binding's namespaces (`token@a|b`).
pub const NAMESPACE_SEPARATOR: char = '|';

/// Who a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's role.
    pub role: Role,
    /// A stable name of the token that is not the token: the first 16 hex
    /// digits of its SHA-256. Budgets are keyed by it; it is never echoed.
    pub token_id: String,
    /// The namespaces the token is bound to (`None`: unbound, any namespace).
    pub namespaces: Option<Vec<String>>,
}

impl Caller {
    /// Whether the caller may act in `namespace`.
    pub fn admits_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|bound| bound.iter().any(|n| n == namespace))
    }
}

/// A token's grant: its role and the namespaces it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    role: Role,
    token_id: String,
    namespaces: Option<Vec<String>>,
}

/// A token entry that cannot be read; the token itself is never quoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenProblem {
    /// The role's variable.
    pub variable: &'static str,
    /// The entry's position in the variable's list (1-based).
    pub entry: usize,
    /// What is wrong and what to write instead.
    pub problem: String,
}

/// The configured tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    by_token: HashMap<String, Grant>,
}

/// Lists each grant by its token id (a digest's prefix, as the logs and
/// budgets name callers), never the token: a configuration printed with
/// `{:?}` (a panic message, a debug log) must not leak credentials.
impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut grants: Vec<&Grant> = self.by_token.values().collect();
        grants.sort_by(|a, b| a.token_id.cmp(&b.token_id));
        f.debug_struct("Tokens").field("grants", &grants).finish()
    }
}

impl Tokens {
    /// Reads each role's comma-separated tokens through `lookup`:
    /// `token` (unbound) or `token@namespace[|namespace…]` (bound; split
    /// at the last `@`). `Ok(None)` when no role has one; every malformed
    /// entry is an error naming its variable and position.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Tokens>, Vec<TokenProblem>> {
        let mut tokens = Tokens::default();
        let mut problems = Vec::new();
        for role in Role::ALL {
            let list = lookup(role.variable()).unwrap_or_default();
            let entries = list.split(',').map(str::trim).filter(|e| !e.is_empty());
            for (n, entry) in entries.enumerate() {
                match parse_entry(entry) {
                    Ok((token, namespaces)) => tokens.insert(token, role, namespaces),
                    Err(problem) => problems.push(TokenProblem {
                        variable: role.variable(),
                        entry: n + 1,
                        problem,
                    }),
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok((!tokens.by_token.is_empty()).then_some(tokens))
    }

    /// Unbound tokens given directly (tests).
    pub fn new(tokens: impl IntoIterator<Item = (String, Role)>) -> Tokens {
        let mut out = Tokens::default();
        for (token, role) in tokens {
            out.insert(token, role, None);
        }
        out
    }

    /// These tokens and `token` bound to `namespaces` (tests).
    pub fn with_bound(mut self, token: &str, role: Role, namespaces: &[&str]) -> Tokens {
        let bound = namespaces.iter().map(|n| (*n).to_owned()).collect();
        self.insert(token.to_owned(), role, Some(bound));
        self
    }

    fn insert(&mut self, token: String, role: Role, namespaces: Option<Vec<String>>) {
        let token_id = token_id(&token);
        self.by_token.insert(
            token,
            Grant {
                role,
                token_id,
                namespaces,
            },
        );
    }

    /// The role of a presented bearer token.
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        self.caller_of(presented).map(|c| c.role)
    }

    /// Who a presented bearer token authenticates, if anyone.
    pub fn caller_of(&self, presented: &str) -> Option<Caller> {
        // Both sides are compared as SHA-256 digests, every configured
        // token each time, byte by byte without an early exit: the time
        // taken says neither how much of a token was guessed nor how long
        // the configured tokens are.
        let presented = digest(presented);
        let mut found = None;
        for (token, grant) in &self.by_token {
            if constant_time_eq(&digest(token), &presented) {
                found = Some(grant);
            }
        }
        found.map(|grant| Caller {
            role: grant.role,
            token_id: grant.token_id.clone(),
            namespaces: grant.namespaces.clone(),
        })
    }
}

/// One entry of a role's list: the token and its binding.
fn parse_entry(entry: &str) -> Result<(String, Option<Vec<String>>), String> {
    let Some((token, bound)) = entry.rsplit_once(BINDING_SEPARATOR) else {
        return Ok((entry.to_owned(), None));
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(format!(
            "the entry has a namespace binding but no token: write token{BINDING_SEPARATOR}namespace"
        ));
    }
    let mut namespaces = Vec::new();
    for namespace in bound.split(NAMESPACE_SEPARATOR).map(str::trim) {
        if namespace.is_empty() {
            return Err(format!(
                "the token's binding names an empty namespace: write token{BINDING_SEPARATOR}namespace or token{BINDING_SEPARATOR}a{NAMESPACE_SEPARATOR}b, or leave the token unbound without {BINDING_SEPARATOR}"
            ));
        }
        if namespace
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(
                "a bound namespace must not contain whitespace or control characters".into(),
            );
        }
        if !namespaces.iter().any(|n| n == namespace) {
            namespaces.push(namespace.to_owned());
        }
    }
    Ok((token.to_owned(), Some(namespaces)))
}

/// The token's stable name: the first 16 hex digits of its SHA-256.
fn token_id(token: &str) -> String {
    digest(token)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
        _ if path.starts_with("/api/bridge-adapters/webhook/") => Plane::Webhook,
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
    fn tokens_print_their_ids_never_the_tokens() {
        let tokens = Tokens::new([
            ("secret-worker-token".to_owned(), Role::Worker),
            ("secret-admin-token".to_owned(), Role::Admin),
        ])
        .with_bound("secret-bound-token", Role::Operator, &["tenant-a"]);
        let printed = format!("{tokens:?} {tokens:#?}");
        assert!(!printed.contains("secret-"), "{printed}");
        for token in [
            "secret-worker-token",
            "secret-admin-token",
            "secret-bound-token",
        ] {
            assert!(printed.contains(&token_id(token)), "{printed}");
        }
        assert!(printed.contains("tenant-a"), "{printed}");
    }

    #[test]
    fn tokens_map_to_roles_and_planes_admit_by_role() {
        let env = HashMap::from([
            ("DW_AUTH_WORKER_TOKENS", "w1, w2"),
            ("DW_AUTH_OPERATOR_TOKENS", "o1"),
            ("DW_AUTH_ADMIN_TOKENS", "a1"),
        ]);
        let tokens = Tokens::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .unwrap()
            .unwrap();
        assert_eq!(tokens.role_of("w2"), Some(Role::Worker));
        assert_eq!(tokens.role_of("o1"), Some(Role::Operator));
        assert_eq!(tokens.role_of("a1"), Some(Role::Admin));
        assert_eq!(tokens.role_of("w"), None);
        assert!(Tokens::from_lookup(|_| Some(" , ".into()))
            .unwrap()
            .is_none());

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
        assert_eq!(
            plane_of("POST", "/api/bridge-adapters/webhook/stripe"),
            Plane::Webhook
        );
    }

    #[test]
    fn tokens_bind_to_namespaces_and_unbound_tokens_stay_unbound() {
        let env = HashMap::from([
            (
                "DW_AUTH_OPERATOR_TOKENS",
                "plain, t@nt@tenant-a, multi@a|b|a",
            ),
            ("DW_AUTH_WORKER_TOKENS", "w@tenant-a"),
        ]);
        let tokens = Tokens::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .unwrap()
            .unwrap();
        let plain = tokens.caller_of("plain").unwrap();
        assert_eq!((plain.role, &plain.namespaces), (Role::Operator, &None));
        assert!(plain.admits_namespace("anything"));
        // Split at the last '@': the token may hold one.
        let bound = tokens.caller_of("t@nt").unwrap();
        assert_eq!(bound.namespaces, Some(vec!["tenant-a".to_owned()]));
        assert!(bound.admits_namespace("tenant-a") && !bound.admits_namespace("tenant-b"));
        assert_eq!(
            tokens.caller_of("t@nt@tenant-a"),
            None,
            "the binding is not the token"
        );
        let multi = tokens.caller_of("multi").unwrap();
        assert_eq!(multi.namespaces, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(tokens.role_of("w"), Some(Role::Worker));
        // The id names the token without being it, and differs per token.
        assert_eq!(plain.token_id.len(), 16);
        assert!(!plain.token_id.contains("plain"));
        assert_ne!(plain.token_id, bound.token_id);
        assert_eq!(tokens.caller_of("plain").unwrap().token_id, plain.token_id);
    }

    #[test]
    fn malformed_bindings_are_refused_naming_variable_and_entry_not_token() {
        let env = HashMap::from([(
            "DW_AUTH_ADMIN_TOKENS",
            "ok, secret-one@, @tenant, secret-two@a||b",
        )]);
        let problems = Tokens::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap_err();
        let entries: Vec<usize> = problems.iter().map(|p| p.entry).collect();
        assert_eq!(entries, [2, 3, 4]);
        for p in &problems {
            assert_eq!(p.variable, "DW_AUTH_ADMIN_TOKENS");
            assert!(!p.problem.contains("secret"), "{}", p.problem);
        }
        assert!(
            problems[1].problem.contains("no token"),
            "{}",
            problems[1].problem
        );
    }
}
