//! Text from outside (CSR and node names, messages that quote them) made safe to print on a
//! terminal or in a text log line: [`Escaped`] escapes what could break the line, move the
//! cursor, recolor the terminal or reorder what is shown; [`short_name`] also cuts a name to
//! [`MAX_NAME_BYTES`], on a character boundary ([`prefix_within`], the one place text is cut).
//!
//! ```
//! use node_csr_approver::display::{Escaped, short_name};
//!
//! assert_eq!(Escaped("csr-1\nINFO approved\u{1b}[2K").to_string(), r"csr-1\nINFO approved\u{1b}[2K");
//! assert_eq!(short_name(&"a".repeat(300)).to_string(), format!("{}...[300 bytes]", "a".repeat(253)));
//! ```
//!
//! A backslash is left as it is, so text that was already escaped (a `{:?}` inside a message)
//! is not escaped twice; `\n` in the output may therefore also be a backslash and an `n` in the
//! name. The JSON outputs (`check -o json`, `--log-format json`) are exact.

use std::fmt::{self, Write};

/// The longest name [`short_name`] prints in full, in bytes: a DNS subdomain's maximum, which is
/// what Node names and well-formed CSR names are limited to.
pub const MAX_NAME_BYTES: usize = 253;

/// Whether `c` is escaped: C0 and C1 controls and DEL (newline, carriage return, tab, escape
/// `\x1b`, NEL `\u{85}`, CSI `\u{9b}`, …), the bidirectional embeddings, overrides, isolates and
/// marks (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), the line and paragraph
/// separators (U+2028, U+2029), and the invisible zero-width characters and byte-order mark
/// (U+200B–U+200D, U+2060–U+2064, U+FEFF).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// Displays a string with every character [`needs_escape`] names written as Rust writes it in
/// `{:?}`: `\n`, `\r`, `\t`, `\0`, otherwise `\u{hex}` (`\u{1b}`, `\u{202e}`). Everything else,
/// including quotes and backslashes, is written as it is, so a name shows on one line and in
/// logical order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0)
    }
}

/// Displays a string as the text logs write a string field: in double quotes, with `"` and `\`
/// escaped as `{:?}` escapes them, and every character [`needs_escape`] names escaped as
/// [`Escaped`] does, so that text from outside (a certificate's subject) shows where it begins and
/// ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{:?}", self.0)
    }
}

/// Writes `text` to `out`, escaping as [`Escaped`] does.
pub fn write_escaped(out: &mut impl Write, text: &str) -> fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find(needs_escape) {
        out.write_str(&rest[..at])?;
        let mut chars = rest[at..].chars();
        if let Some(c) = chars.next() {
            for escaped in c.escape_debug() {
                out.write_char(escaped)?;
            }
        }
        rest = chars.as_str();
    }
    out.write_str(rest)
}

/// A name for a log line: escaped as [`Escaped`] does and, when longer than [`MAX_NAME_BYTES`],
/// cut to its first [`MAX_NAME_BYTES`] bytes (at a character boundary) followed by
/// `...[N bytes]`, N the full length. Made by [`short_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortName<'a> {
    shown: &'a str,
    full_len: usize,
}

/// The name as a log line should show it: see [`ShortName`].
pub fn short_name(name: &str) -> ShortName<'_> {
    ShortName { shown: prefix_within(name, MAX_NAME_BYTES), full_len: name.len() }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary: a
/// character across the bound is dropped whole.
pub fn prefix_within(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `text` in at most [`MAX_MESSAGE_BYTES`]: cut on a character boundary and marked with `…` when
/// longer.
pub fn cut_message(text: &str) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text.to_owned();
    }
    format!("{}…", prefix_within(text, MAX_MESSAGE_BYTES - '…'.len_utf8()))
}

impl fmt::Display for ShortName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.shown)?;
        if self.shown.len() < self.full_len { write!(f, "...[{} bytes]", self.full_len) } else { Ok(()) }
    }
}

/// A [`Write`] that escapes what is written through it as [`Escaped`] does.
#[derive(Debug)]
pub struct EscapingWriter<W>(pub W);

impl<W: Write> Write for EscapingWriter<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_escaped(&mut self.0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_as_rust_debug_writes_them() {
        let cases = [
            ("plain-name.example.com", "plain-name.example.com"),
            ("a\nb", r"a\nb"),
            ("a\r\nb", r"a\r\nb"),
            ("tab\there", r"tab\there"),
            ("\u{1b}[31mred\u{1b}[0m", r"\u{1b}[31mred\u{1b}[0m"),
            ("nul\0", r"nul\0"),
            ("del\u{7f}", r"del\u{7f}"),
            ("c1 \u{85} \u{9b}", r"c1 \u{85} \u{9b}"),
            ("bidi \u{202e}txt.exe", r"bidi \u{202e}txt.exe"),
            ("\u{202a}\u{202b}\u{202c}\u{202d}", r"\u{202a}\u{202b}\u{202c}\u{202d}"),
            ("\u{2066}\u{2067}\u{2068}\u{2069}", r"\u{2066}\u{2067}\u{2068}\u{2069}"),
            ("marks \u{200e}\u{200f}\u{61c}", r"marks \u{200e}\u{200f}\u{61c}"),
            ("lines \u{2028}\u{2029}", r"lines \u{2028}\u{2029}"),
            ("zero\u{200b}width\u{feff}", r"zero\u{200b}width\u{feff}"),
        ];
        for (raw, want) in cases {
            let got = Escaped(raw).to_string();
            assert_eq!(got, want, "{raw:?}");
            assert!(!got.chars().any(needs_escape), "{got:?}");
        }
    }

    #[test]
    fn printable_text_is_left_alone() {
        for text in ["", r#"quotes " ' and \ backslash"#, "ünïcödé 名前 ✓", "e\u{301}", r"already \n escaped"] {
            assert_eq!(Escaped(text).to_string(), text);
        }
        for c in ['a', ' ', '~', '\u{a0}', 'é', '\u{2065}', '\u{206a}', '\u{fffd}'] {
            assert!(!needs_escape(c), "{c:?}");
        }
    }

    #[test]
    fn short_names_are_cut_at_a_character_boundary_and_say_how_long_they_were() {
        let fits = "n".repeat(MAX_NAME_BYTES);
        assert_eq!(short_name(&fits).to_string(), fits);
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(short_name(&long).to_string(), format!("{fits}...[254 bytes]"));
        // A two-byte character across the bound is dropped whole.
        let straddling = format!("{}é{}", "n".repeat(MAX_NAME_BYTES - 1), "x".repeat(10));
        let shown = short_name(&straddling).to_string();
        assert_eq!(shown, format!("{}...[{} bytes]", "n".repeat(MAX_NAME_BYTES - 1), straddling.len()));
        // The bound applies to the name; escaping happens after cutting.
        let hostile = format!("{}\n{}", "a".repeat(10), "b".repeat(1000));
        let shown = short_name(&hostile).to_string();
        assert!(shown.starts_with(r"aaaaaaaaaa\nbbb") && shown.ends_with("b...[1011 bytes]"), "{shown}");
        assert!(!shown.contains('\n'));
        assert_eq!(short_name("csr\u{1b}").to_string(), r"csr\u{1b}");
    }

    #[test]
    fn quoted_text_is_escaped_within_its_quotes() {
        let cases = [
            ("CN=node-1", r#""CN=node-1""#),
            ("CN=a\u{202e}gpj.exe", r#""CN=a\u{202e}gpj.exe""#),
            ("CN=a\nO=b\u{1b}[31m", r#""CN=a\nO=b\u{1b}[31m""#),
            (r#"CN=say "hi", O=x\,y"#, r#""CN=say \"hi\", O=x\\,y""#),
            ("CN=\u{200b}\u{2066}\u{feff}", r#""CN=\u{200b}\u{2066}\u{feff}""#),
        ];
        for (raw, want) in cases {
            let got = Quoted(raw).to_string();
            assert_eq!(got, want, "{raw:?}");
            assert!(!got.chars().any(needs_escape), "{got:?}");
        }
    }

    #[test]
    fn the_escaping_writer_escapes_every_piece_written() {
        let mut out = EscapingWriter(String::new());
        let (text, quoted) = ("a\nb", "c\u{202e}");
        write!(out, "{text}|{quoted:?}|{}", 7).unwrap();
        assert_eq!(out.0, r#"a\nb|"c\u{202e}"|7"#);
    }

    #[test]
    fn messages_are_cut_to_1024_bytes_on_a_character_boundary() {
        let short = "ä".repeat(512);
        assert_eq!(cut_message(&short), short);
        let long = "ä".repeat(600);
        let cut = cut_message(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES && cut.len() > MAX_MESSAGE_BYTES - 4, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
