//! Percent-decoding of URL parts and escaped key segments (etcd, ZooKeeper).

/// `s` with its `%XX` escapes decoded; an invalid escape stays as written and
/// bytes that are not UTF-8 become U+FFFD.
pub(crate) fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn decodes_escapes_and_keeps_invalid_ones() {
        assert_eq!(super::decode("a%2Fb%25c"), "a/b%c");
        assert_eq!(super::decode("%E2%9C%93"), "\u{2713}");
        assert_eq!(super::decode("100%"), "100%");
        assert_eq!(super::decode("%zz%4"), "%zz%4");
        assert_eq!(super::decode("%FF"), "\u{fffd}");
    }
}
