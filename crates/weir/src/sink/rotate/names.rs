//! Which file names a rotation pattern could have produced, for the rolling
//! buffer's adoption of the files an earlier run left
//! ([`super::RotatingWriter`]): a file no pattern could have written is
//! never deleted.

use super::SEQ;
use chrono::format::{Item, Pad, StrftimeItems};

/// Which names a pattern's file-name part could have produced: its literal
/// text, a run of digits for each numeric strftime conversion, `{seq}` and
/// the inserted `.N`, and a run of letters, digits and signs for the others
/// (month and day names, zones, fractions of a second).
pub(super) struct NameMatcher {
    tokens: Vec<Token>,
}

#[derive(Debug, PartialEq)]
enum Token {
    Literal(String),
    /// One or more digits, after optional spaces (`%e`, `%k`).
    Digits {
        spaces: bool,
    },
    /// A sequence number: one or more digits.
    Seq,
    /// The `.N` weir may insert before the extension: absent, or a dot and digits.
    Inserted,
    /// Zero or more of the characters other conversions write.
    Text,
}

impl NameMatcher {
    pub(super) fn new(name: &str) -> NameMatcher {
        let mut tokens = Vec::new();
        let mut literal = String::new();
        let flush = |literal: &mut String, tokens: &mut Vec<Token>| {
            let mut parts = literal.split(SEQ);
            if let Some(first) = parts.next() {
                if !first.is_empty() {
                    tokens.push(Token::Literal(first.to_string()));
                }
                for part in parts {
                    tokens.push(Token::Seq);
                    if !part.is_empty() {
                        tokens.push(Token::Literal(part.to_string()));
                    }
                }
            }
            literal.clear();
        };
        for item in StrftimeItems::new(name) {
            match item {
                Item::Literal(s) | Item::Space(s) => literal.push_str(s),
                Item::OwnedLiteral(s) | Item::OwnedSpace(s) => literal.push_str(&s),
                Item::Numeric(_, pad) => {
                    flush(&mut literal, &mut tokens);
                    tokens.push(Token::Digits { spaces: pad == Pad::Space });
                }
                Item::Fixed(_) => {
                    flush(&mut literal, &mut tokens);
                    tokens.push(Token::Text);
                }
                // Refused when the writer was made.
                Item::Error => {}
            }
        }
        flush(&mut literal, &mut tokens);
        // The inserted `.N` goes before the last dot of the name, unless the
        // name starts with it (insert_before_extension); else at the end.
        let mut offset_known = true;
        let mut offset = 0usize;
        let mut split = None;
        for (i, t) in tokens.iter().enumerate() {
            if let Token::Literal(s) = t {
                if let Some(dot) = s.rfind('.') {
                    if !(offset_known && offset + dot == 0) {
                        split = Some((i, dot));
                    }
                }
                offset += s.len();
            } else {
                offset_known = false;
            }
        }
        if let Some((i, dot)) = split {
            if let Token::Literal(s) = &tokens[i] {
                let (before, after) = s.split_at(dot);
                let (before, after) = (before.to_string(), after.to_string());
                let mut replaced = Vec::new();
                if !before.is_empty() {
                    replaced.push(Token::Literal(before));
                }
                replaced.push(Token::Inserted);
                replaced.push(Token::Literal(after));
                tokens.splice(i..=i, replaced);
            }
        } else {
            tokens.push(Token::Inserted);
        }
        NameMatcher { tokens }
    }

    /// Whether the pattern could have produced `name`: `Some` with the
    /// largest sequence number in it (`{seq}` or an inserted `.N`), if any.
    pub(super) fn matches(&self, name: &str) -> Option<Option<u64>> {
        let mut best = None;
        if match_from(&self.tokens, name.as_bytes(), None, &mut best) {
            Some(best.flatten())
        } else {
            None
        }
    }
}

/// Backtracking match of `tokens` against all of `s`; on success `found`
/// holds the largest sequence number of the first way that matched.
fn match_from(tokens: &[Token], s: &[u8], seq: Option<u64>, found: &mut Option<Option<u64>>) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        if s.is_empty() {
            *found = Some(seq);
            return true;
        }
        return false;
    };
    let digits = |from: usize| from + s[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let with = |seq: Option<u64>, digits: &[u8]| -> Option<u64> {
        // A run too long for a u64 still matches; it just sets no number.
        let n = std::str::from_utf8(digits).ok().and_then(|d| d.parse::<u64>().ok());
        match (seq, n) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    };
    match first {
        Token::Literal(l) => s.starts_with(l.as_bytes()) && match_from(rest, &s[l.len()..], seq, found),
        Token::Digits { spaces } => {
            let start = if *spaces { s.iter().take_while(|b| **b == b' ').count() } else { 0 };
            let end = digits(start);
            (start + 1..=end).rev().any(|e| match_from(rest, &s[e..], seq, found))
        }
        Token::Seq => {
            let end = digits(0);
            (1..=end).rev().any(|e| match_from(rest, &s[e..], with(seq, &s[..e]), found))
        }
        Token::Inserted => {
            let dotted = s.first() == Some(&b'.') && {
                let end = digits(1);
                (2..=end).rev().any(|e| match_from(rest, &s[e..], with(seq, &s[1..e]), found))
            };
            dotted || match_from(rest, s, seq, found)
        }
        Token::Text => {
            let end = s.iter().take_while(|b| b.is_ascii_alphanumeric() || b"+-:.,_ ".contains(b)).count();
            (0..=end).rev().any(|e| match_from(rest, &s[e..], seq, found))
        }
    }
}
