//! A parser for PHP files that `return` an array literal, such as the
//! reference server's `config/dw-bounded-growth.php`.
//!
//! Only constant data is accepted: strings (with their escapes, and `.`
//! concatenation of constants), integers, floats, booleans, null, nested
//! `[...]` / `array(...)`, and `Foo::class`, resolved through the file's
//! `namespace` and `use` statements the way PHP resolves class names.
//! Anything that needs PHP to evaluate it (`env(...)`, constants, variables,
//! interpolation, heredocs) is an error naming its line and column: a
//! converted policy must say exactly what the PHP file says, never a guess.

use std::collections::HashMap;

/// A parse failure at a 1-based line and column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhpError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// A constant PHP value with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The value.
    pub kind: Kind,
    /// Byte offset of its first character.
    pub at: usize,
}

/// The kinds of constant the parser evaluates.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A string, escapes decoded, concatenations joined.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float, as written.
    Float(String),
    /// `true` / `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// An array: entries with their key, if written.
    Array(Vec<(Option<Value>, Value)>),
    /// `Foo::class`, resolved to its fully qualified name (no leading `\`).
    Class(String),
}

impl Kind {
    /// The kind's name in messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Kind::Str(_) => "a string",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a float",
            Kind::Bool(_) => "a boolean",
            Kind::Null => "null",
            Kind::Array(_) => "an array",
            Kind::Class(_) => "a class name",
        }
    }
}

/// How deep arrays may nest; a policy needs four levels.
const MAX_DEPTH: usize = 64;

/// The value the file returns.
pub fn parse(src: &str) -> Result<Value, PhpError> {
    let mut parser = Parser {
        src,
        pos: 0,
        namespace: String::new(),
        uses: HashMap::new(),
        depth: 0,
    };
    parser.file()
}

/// 1-based line and character column of byte `offset` in `src`.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    dwpolicy::Span::line_col(src, offset)
}

struct Parser<'s> {
    src: &'s str,
    pos: usize,
    namespace: String,
    /// Lowercased alias → fully qualified class name.
    uses: HashMap<String, String>,
    depth: usize,
}

impl<'s> Parser<'s> {
    fn error<T>(&self, at: usize, message: impl Into<String>) -> Result<T, PhpError> {
        let (line, column) = line_col(self.src, at);
        Err(PhpError {
            line,
            column,
            message: message.into(),
        })
    }

    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &str) -> Result<(), PhpError> {
        self.skip_trivia()?;
        if self.eat(token) {
            Ok(())
        } else {
            let found = self
                .rest()
                .chars()
                .next()
                .map_or("the end of the file".to_owned(), |c| format!("`{c}`"));
            self.error(self.pos, format!("expected {what}, found {found}"))
        }
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), PhpError> {
        loop {
            let rest = self.rest();
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if self.rest().starts_with("//") || self.rest().starts_with('#') {
                let line = self.rest().find('\n').unwrap_or(self.rest().len());
                // `?>` ends a line comment in PHP as well.
                let close = self.rest()[..line].find("?>").unwrap_or(line);
                self.pos += close;
            } else if self.rest().starts_with("/*") {
                match self.rest()[2..].find("*/") {
                    Some(end) => self.pos += end + 4,
                    None => return self.error(self.pos, "unterminated `/*` comment"),
                }
            } else {
                return Ok(());
            }
        }
    }

    fn word(&mut self) -> &'s str {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\\'))
            .unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn file(&mut self) -> Result<Value, PhpError> {
        self.eat("\u{feff}");
        if self.rest().starts_with("#!") {
            self.pos += self.rest().find('\n').unwrap_or(self.rest().len());
            self.skip_trivia()?;
        }
        if !self
            .rest()
            .get(..5)
            .is_some_and(|s| s.eq_ignore_ascii_case("<?php"))
        {
            return self.error(self.pos, "expected the file to start with `<?php`");
        }
        self.pos += 5;
        loop {
            self.skip_trivia()?;
            let at = self.pos;
            if self.rest().is_empty() {
                return self.error(at, "the file has no `return [...]` statement");
            }
            let keyword = self.word().to_ascii_lowercase();
            match keyword.as_str() {
                "declare" => {
                    self.expect("(", "`(` after declare")?;
                    let close = self.rest().find(')').map_or(self.rest().len(), |i| i + 1);
                    self.pos += close;
                    self.expect(";", "`;`")?;
                }
                "namespace" => {
                    self.skip_trivia()?;
                    self.namespace = self.word().trim_start_matches('\\').to_owned();
                    self.skip_trivia()?;
                    if self.peek() == Some('{') {
                        return self
                            .error(self.pos, "braced `namespace { }` blocks are not supported");
                    }
                    self.expect(";", "`;` after the namespace name")?;
                }
                "use" => self.use_statement()?,
                "return" => {
                    let value = self.expr()?;
                    self.skip_trivia()?;
                    if !(self.eat(";") || self.rest().starts_with("?>") || self.rest().is_empty()) {
                        return self.error(self.pos, "expected `;` after the returned array");
                    }
                    return Ok(value);
                }
                "" => {
                    let c = self.peek().unwrap_or(' ');
                    return self.error(
                        at,
                        format!("unexpected `{c}`; a policy file is `<?php return [...];`"),
                    );
                }
                _ => {
                    return self.error(
                        at,
                        format!(
                        "unsupported statement `{keyword}`; a policy file is `<?php return [...];`"
                    ),
                    )
                }
            }
        }
    }

    /// `use A\B [as C], D;` and `use A\{B, C as D};`; function and const
    /// imports are skipped (they cannot name a class).
    fn use_statement(&mut self) -> Result<(), PhpError> {
        self.skip_trivia()?;
        let save = self.pos;
        let kind = self.word().to_ascii_lowercase();
        if kind == "function" || kind == "const" {
            let end = self.rest().find(';').map_or(self.rest().len(), |i| i + 1);
            self.pos += end;
            return Ok(());
        }
        self.pos = save;
        loop {
            self.skip_trivia()?;
            let at = self.pos;
            let name = self.word().trim_start_matches('\\').to_owned();
            if name.is_empty() {
                return self.error(at, "expected a class name after `use`");
            }
            if let Some(group) = name.strip_suffix('\\') {
                self.expect("{", "`{` of a group use")?;
                loop {
                    self.skip_trivia()?;
                    if self.eat("}") {
                        break;
                    }
                    let inner = self.word().to_owned();
                    if inner.is_empty() {
                        return self.error(self.pos, "expected a class name in the group use");
                    }
                    self.alias(format!("{group}\\{inner}"))?;
                    self.skip_trivia()?;
                    if !self.eat(",") {
                        self.expect("}", "`,` or `}` in the group use")?;
                        break;
                    }
                }
            } else {
                self.alias(name)?;
            }
            self.skip_trivia()?;
            if !self.eat(",") {
                return self.expect(";", "`;` after the use statement");
            }
        }
    }

    fn alias(&mut self, full: String) -> Result<(), PhpError> {
        self.skip_trivia()?;
        let save = self.pos;
        let alias = if self.word().eq_ignore_ascii_case("as") {
            self.skip_trivia()?;
            self.word().to_owned()
        } else {
            self.pos = save;
            full.rsplit('\\').next().unwrap_or(&full).to_owned()
        };
        self.uses.insert(alias.to_ascii_lowercase(), full);
        Ok(())
    }

    /// A class name as written → fully qualified, by PHP's rules.
    fn resolve(&self, name: &str) -> String {
        if let Some(full) = name.strip_prefix('\\') {
            return full.to_owned();
        }
        let (first, rest) = match name.split_once('\\') {
            Some((first, rest)) => (first, Some(rest)),
            None => (name, None),
        };
        let qualify = |base: &str| match rest {
            Some(rest) if base.is_empty() => rest.to_owned(),
            Some(rest) => format!("{base}\\{rest}"),
            None => base.to_owned(),
        };
        if first.eq_ignore_ascii_case("namespace") && rest.is_some() {
            return qualify(&self.namespace);
        }
        if let Some(full) = self.uses.get(&first.to_ascii_lowercase()) {
            return qualify(full);
        }
        if self.namespace.is_empty() {
            name.to_owned()
        } else {
            format!("{}\\{name}", self.namespace)
        }
    }

    /// A term, or constant terms joined with `.`.
    fn expr(&mut self) -> Result<Value, PhpError> {
        let first = self.term()?;
        let mut joined: Option<String> = None;
        loop {
            self.skip_trivia()?;
            // `..` would be a syntax error in PHP; `...` is a spread.
            if !self.rest().starts_with('.') || self.rest().starts_with("..") {
                break;
            }
            let dot = self.pos;
            self.pos += 1;
            let next = self.term()?;
            let acc = match joined.take() {
                Some(acc) => acc,
                None => self.concat_part(&first, dot)?,
            };
            joined = Some(acc + &self.concat_part(&next, dot)?);
        }
        Ok(match joined {
            Some(text) => Value {
                kind: Kind::Str(text),
                at: first.at,
            },
            None => first,
        })
    }

    fn concat_part(&self, value: &Value, dot: usize) -> Result<String, PhpError> {
        match &value.kind {
            Kind::Str(s) | Kind::Class(s) | Kind::Float(s) => Ok(s.clone()),
            Kind::Int(i) => Ok(i.to_string()),
            other => self.error(dot, format!("cannot concatenate {}", other.describe())),
        }
    }

    fn term(&mut self) -> Result<Value, PhpError> {
        self.skip_trivia()?;
        let at = self.pos;
        let value = |kind| Ok(Value { kind, at });
        match self.peek() {
            None => self.error(at, "unexpected end of the file"),
            Some('\'') => value(Kind::Str(self.single_quoted()?)),
            Some('"') => value(Kind::Str(self.double_quoted()?)),
            Some('[') => {
                self.pos += 1;
                value(Kind::Array(self.array_items(']')?))
            }
            Some('-' | '+' | '0'..='9') => self.number(),
            Some('$') => self.error(at, "variables cannot be evaluated; write the value itself"),
            Some('<') if self.rest().starts_with("<<<") => self.error(
                at,
                "heredoc and nowdoc strings are not supported; use a quoted string",
            ),
            Some(c) if c.is_alphabetic() || c == '_' || c == '\\' => self.named(at),
            Some(c) => self.error(at, format!("unexpected `{c}`")),
        }
    }

    fn named(&mut self, at: usize) -> Result<Value, PhpError> {
        let name = self.word();
        let lower = name.to_ascii_lowercase();
        let value = |kind| Ok(Value { kind, at });
        self.skip_trivia()?;
        if lower == "array" && self.peek() == Some('(') {
            self.pos += 1;
            return value(Kind::Array(self.array_items(')')?));
        }
        if self.eat("::") {
            self.skip_trivia()?;
            let member = self.word();
            if member.eq_ignore_ascii_case("class") {
                if matches!(lower.as_str(), "self" | "static" | "parent") {
                    return self.error(
                        at,
                        format!("`{name}::class` has no class to refer to in a returned array"),
                    );
                }
                return value(Kind::Class(self.resolve(name)));
            }
            return self.error(
                at,
                format!(
                    "class constant `{name}::{member}` cannot be evaluated; write the value itself"
                ),
            );
        }
        if self.peek() == Some('(') {
            return self.error(
                at,
                format!("function call `{name}(...)` cannot be evaluated; write the value itself"),
            );
        }
        match lower.as_str() {
            "true" => value(Kind::Bool(true)),
            "false" => value(Kind::Bool(false)),
            "null" => value(Kind::Null),
            _ => self.error(
                at,
                format!("constant `{name}` cannot be evaluated; write the value itself"),
            ),
        }
    }

    fn array_items(&mut self, close: char) -> Result<Vec<(Option<Value>, Value)>, PhpError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.error(
                self.pos,
                format!("arrays nest deeper than {MAX_DEPTH} levels"),
            );
        }
        let mut items = Vec::new();
        loop {
            self.skip_trivia()?;
            if self.peek() == Some(close) {
                self.pos += 1;
                break;
            }
            let first = self.expr()?;
            self.skip_trivia()?;
            let item = if self.eat("=>") {
                (Some(first), self.expr()?)
            } else {
                (None, first)
            };
            items.push(item);
            self.skip_trivia()?;
            if !self.eat(",") {
                self.expect(&close.to_string(), &format!("`,` or `{close}`"))?;
                break;
            }
        }
        self.depth -= 1;
        Ok(items)
    }

    fn number(&mut self) -> Result<Value, PhpError> {
        let at = self.pos;
        let negative = self.eat("-");
        if !negative {
            self.eat("+");
        }
        let rest = self.rest();
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        let after = &rest[digits..];
        let is_float = (after.starts_with('.')
            && after[1..].starts_with(|c: char| c.is_ascii_digit()))
            || after.starts_with(['e', 'E']);
        if digits == 0 || is_float || after.starts_with(['x', 'X', 'b', 'B', 'o', 'O']) {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            let text = &self.src[at..self.pos + len];
            self.pos += len;
            if digits > 0 && is_float {
                return Ok(Value {
                    kind: Kind::Float(text.replace('_', "")),
                    at,
                });
            }
            return self.error(
                at,
                format!("unsupported number `{text}`; write a decimal integer"),
            );
        }
        let text = rest[..digits].replace('_', "");
        self.pos += digits;
        let magnitude: i128 = text.parse().unwrap_or(i128::MAX);
        let signed = if negative { -magnitude } else { magnitude };
        match i64::try_from(signed) {
            Ok(n) => Ok(Value {
                kind: Kind::Int(n),
                at,
            }),
            Err(_) => self.error(at, "integer out of range"),
        }
    }

    fn single_quoted(&mut self) -> Result<String, PhpError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, e @ ('\'' | '\\'))) => out.push(e),
                    Some((_, e)) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        self.error(start, "unterminated string")
    }

    fn double_quoted(&mut self) -> Result<String, PhpError> {
        let start = self.pos;
        self.pos += 1;
        let body = self.rest();
        let mut out = String::new();
        let mut chars = body.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '$' | '{' if interpolates(c, &body[i + 1..]) => {
                    return self.error(
                        self.pos + i,
                        "string interpolation cannot be evaluated; write the value itself",
                    );
                }
                '\\' => {
                    let Some((_, e)) = chars.next() else { break };
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'v' => out.push('\u{b}'),
                        'e' => out.push('\u{1b}'),
                        'f' => out.push('\u{c}'),
                        '\\' | '$' | '"' => out.push(e),
                        '0'..='7' => {
                            let mut code = e.to_digit(8).unwrap_or(0);
                            for _ in 0..2 {
                                match chars.peek().and_then(|(_, d)| d.to_digit(8)) {
                                    Some(d) => {
                                        code = code * 8 + d;
                                        chars.next();
                                    }
                                    None => break,
                                }
                            }
                            out.push(byte_char(code & 0xff));
                        }
                        'x' if chars.peek().is_some_and(|(_, d)| d.is_ascii_hexdigit()) => {
                            let mut code = 0;
                            for _ in 0..2 {
                                match chars.peek().and_then(|(_, d)| d.to_digit(16)) {
                                    Some(d) => {
                                        code = code * 16 + d;
                                        chars.next();
                                    }
                                    None => break,
                                }
                            }
                            out.push(byte_char(code));
                        }
                        'u' if chars.peek().is_some_and(|(_, d)| *d == '{') => {
                            chars.next();
                            let mut hex = String::new();
                            for (_, d) in chars.by_ref() {
                                if d == '}' {
                                    break;
                                }
                                hex.push(d);
                            }
                            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                                Some(ch) => out.push(ch),
                                None => {
                                    return self.error(
                                        self.pos + i,
                                        format!("invalid escape `\\u{{{hex}}}`"),
                                    )
                                }
                            }
                        }
                        other => {
                            out.push('\\');
                            out.push(other);
                        }
                    }
                }
                c => out.push(c),
            }
        }
        self.error(start, "unterminated string")
    }
}

/// Whether `$` or `{` at this point of a double-quoted string starts an
/// interpolation (`$name`, `${expr}`, `{$expr}`).
fn interpolates(c: char, after: &str) -> bool {
    match c {
        '$' => after.starts_with(|n: char| n.is_alphabetic() || n == '_' || n == '{'),
        _ => after.starts_with('$'),
    }
}

/// A byte escape as text: ASCII as itself, other bytes as their Latin-1
/// character (a policy has no business holding raw bytes).
fn byte_char(code: u32) -> char {
    char::from_u32(code).unwrap_or('\u{fffd}')
}

#[cfg(test)]
#[path = "php_array_tests.rs"]
mod tests;
