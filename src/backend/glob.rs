//! Redis's glob (`SCAN ... MATCH`, `KEYS`): `*`, `?`, `[abc]`, `[^a-z]` and `\`
//! escapes, on characters, so the in-memory store lists the locks a server would,
//! and the fleet view matches lock names as `SCAN` matches keys.

/// Whether `text` matches `pattern` as Redis matches a key.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    match_from(&pattern, &text)
}

fn match_from(pattern: &[char], text: &[char]) -> bool {
    let Some((&first, rest)) = pattern.split_first() else {
        return text.is_empty();
    };
    match first {
        '*' => (0..=text.len()).any(|skip| match_from(rest, &text[skip..])),
        '?' => !text.is_empty() && match_from(rest, &text[1..]),
        '[' => {
            let Some((&c, after)) = text.split_first() else {
                return false;
            };
            let (matched, rest) = class(rest, c);
            matched && match_from(rest, after)
        }
        '\\' if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && match_from(&rest[1..], &text[1..])
        }
        literal => text.first() == Some(&literal) && match_from(rest, &text[1..]),
    }
}

/// Whether `c` is in the class that `pattern` opens (just past its `[`), and the
/// pattern after the class's `]` (an unclosed class runs to the end, as in Redis).
fn class(pattern: &[char], c: char) -> (bool, &[char]) {
    let (negated, mut at) = match pattern.first() {
        Some('^') => (true, 1),
        _ => (false, 0),
    };
    let mut found = false;
    while at < pattern.len() && pattern[at] != ']' {
        if pattern[at] == '\\' && at + 1 < pattern.len() {
            found |= pattern[at + 1] == c;
            at += 2;
        } else if at + 2 < pattern.len() && pattern[at + 1] == '-' && pattern[at + 2] != ']' {
            let (low, high) = (
                pattern[at].min(pattern[at + 2]),
                pattern[at].max(pattern[at + 2]),
            );
            found |= (low..=high).contains(&c);
            at += 3;
        } else {
            found |= pattern[at] == c;
            at += 1;
        }
    }
    let rest = pattern.get(at + 1..).unwrap_or(&[]);
    (found != negated, rest)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_as_redis_matches_keys() {
        assert!(matches("rwlock:{inv*}", "rwlock:{inventory}"));
        assert!(!matches("rwlock:{inv*}", "rwlock:{catalog}"));
        assert!(matches("rwlock:{*}", "rwlock:{}"));
        assert!(matches("a?c", "abc") && !matches("a?c", "ac"));
        assert!(matches("[a-c]x", "bx") && !matches("[a-c]x", "dx"));
        assert!(matches("[^a-c]x", "dx") && !matches("[^a-c]x", "ax"));
        assert!(matches("pre\\*:{*}", "pre*:{a}") && !matches("pre\\*:{*}", "prex:{a}"));
        assert!(matches("é*", "élan"));
    }
}
