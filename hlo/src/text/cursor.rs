//! A position in HLO text with the token-level helpers every text parser here shares: skipping
//! whitespace and comments, matching punctuation, reading integers and names, and turning a
//! byte position into the line:column an error reports.

use std::fmt;

/// A parse error at a line and column (both 1-based), with what was expected or found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

pub type ParseResult<T> = Result<T, ParseError>;

/// A cursor over HLO text. Every token-reading method skips leading trivia (whitespace,
/// `/* */` and `//` comments) first, as XLA's lexer does.
#[derive(Clone)]
pub struct Cursor<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Cursor<'a> {
        Cursor { src, pos: 0 }
    }

    pub fn src(&self) -> &'a str {
        self.src
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn set_pos(&mut self, pos: usize) {
        self.pos = pos.min(self.src.len());
    }

    /// The unread text (trivia included).
    pub fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    /// 1-based line and column of a byte position.
    pub fn line_col(&self, pos: usize) -> (usize, usize) {
        let before = &self.src.as_bytes()[..pos.min(self.src.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        // Columns count characters, not bytes, so they match what an editor shows.
        let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
        (line, column)
    }

    pub fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let (line, column) = self.line_col(pos);
        ParseError { line, column, message: message.into() }
    }

    /// An error at the next token.
    pub fn error(&mut self, message: impl Into<String>) -> ParseError {
        self.skip_trivia();
        self.error_at(self.pos, message)
    }

    /// Skips whitespace and comments. An unterminated `/*` comment is left for the caller to
    /// report as an unexpected token.
    pub fn skip_trivia(&mut self) {
        let bytes = self.src.as_bytes();
        loop {
            while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.src[self.pos..].starts_with("//") {
                self.pos = self.src[self.pos..].find('\n').map_or(bytes.len(), |n| self.pos + n);
            } else if self.src[self.pos..].starts_with("/*") {
                match self.src[self.pos + 2..].find("*/") {
                    Some(n) => self.pos += n + 4,
                    None => return,
                }
            } else {
                return;
            }
        }
    }

    pub fn at_end(&mut self) -> bool {
        self.skip_trivia();
        self.pos >= self.src.len()
    }

    /// The next byte after trivia, without consuming it.
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_trivia();
        self.src.as_bytes().get(self.pos).copied()
    }

    /// True when the text after trivia starts with `s`.
    pub fn looking_at(&mut self, s: &str) -> bool {
        self.skip_trivia();
        self.src[self.pos..].starts_with(s)
    }

    /// Consumes `s` if the text after trivia starts with it.
    pub fn eat(&mut self, s: &str) -> bool {
        if self.looking_at(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Consumes `s` or fails with "expects 's'", XLA's wording.
    pub fn expect(&mut self, s: &str) -> ParseResult<()> {
        if self.eat(s) {
            Ok(())
        } else {
            let found = self.describe_next();
            Err(self.error(format!("expects '{s}', found {found}")))
        }
    }

    /// A short description of the next token for error messages.
    pub fn describe_next(&mut self) -> String {
        self.skip_trivia();
        let rest = &self.src[self.pos..];
        if rest.is_empty() {
            return "end of input".to_string();
        }
        let token: String = if rest.as_bytes()[0].is_ascii_alphanumeric() || rest.starts_with(['%', '_', '-']) {
            rest.chars().take_while(|&c| c.is_ascii_alphanumeric() || "%_.-".contains(c)).take(40).collect()
        } else {
            rest.chars().take(1).collect()
        };
        format!("'{token}'")
    }

    /// Reads a decimal integer (optionally negative). Fails on overflow.
    pub fn int(&mut self) -> ParseResult<i64> {
        self.skip_trivia();
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let mut end = start;
        if bytes.get(end) == Some(&b'-') {
            end += 1;
        }
        let digits_start = end;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
        if end == digits_start {
            let found = self.describe_next();
            return Err(self.error_at(start, format!("expects integer, found {found}")));
        }
        let value = self.src[start..end]
            .parse::<i64>()
            .map_err(|_| self.error_at(start, format!("integer {} is out of range", &self.src[start..end])))?;
        self.pos = end;
        Ok(value)
    }

    /// Reads an identifier-like word: letters, digits, `_`, `.`, `-`, optionally prefixed by
    /// `%` (HLO names such as `%add.3` or `get-tuple-element.1`). Returns `None` (consuming
    /// nothing) when the next token is not one.
    pub fn word(&mut self) -> Option<&'a str> {
        self.skip_trivia();
        let bytes = self.src.as_bytes();
        let start = self.pos;
        let mut end = start;
        if bytes.get(end) == Some(&b'%') {
            end += 1;
        }
        let body = end;
        match bytes.get(end) {
            Some(b) if b.is_ascii_alphabetic() || *b == b'_' => {}
            _ => return None,
        }
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || matches!(bytes[end], b'_' | b'.' | b'-')) {
            end += 1;
        }
        if end == body {
            return None;
        }
        self.pos = end;
        Some(&self.src[start..end])
    }

    /// Reads a comma-separated list of items between `open` and `close` (empty allowed).
    pub fn list<T>(
        &mut self,
        open: &str,
        close: &str,
        mut item: impl FnMut(&mut Cursor<'a>) -> ParseResult<T>,
    ) -> ParseResult<Vec<T>> {
        self.expect(open)?;
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if self.eat(close) {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }
}
