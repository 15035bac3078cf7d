//! Owner tokens: 128 random bits per acquisition.

use std::fmt;

/// Identifies one acquisition; only its holder can release or renew it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Token(String);

impl Token {
    /// A fresh token: 128 random bits as 32 hex digits.
    pub(crate) fn random() -> Self {
        Token(format!("{:032x}", rand::random::<u128>()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
