//! Log output: JSON lines or text on stderr. Text lines escape, in every field value and in the
//! message, what could forge a line or drive the terminal (see [`crate::display::Escaped`]), so a
//! CSR or node name holding a newline or an escape sequence stays inside its own log line; JSON
//! escapes those characters by itself.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};

use crate::config::LogFormat;
use crate::display::EscapingWriter;

/// Installs the global subscriber: `format` on stderr, filtered by the EnvFilter directive
/// `filter` (validated at startup), with ANSI colors when stderr is a terminal.
pub fn init(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.fmt_fields(EscapedFields::default()).init(),
    }
}

/// The text format's fields, as tracing-subscriber's [`DefaultFields`] writes them
/// (`name=value`, `{:?}` for strings), every value and the message escaped.
#[derive(Debug, Default)]
pub struct EscapedFields(DefaultFields);

impl<'a> MakeVisitor<Writer<'a>> for EscapedFields {
    type Visitor = EscapingVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Self::Visitor {
        EscapingVisitor(self.0.make_visitor(target))
    }
}

/// The visitor of [`EscapedFields`]: hands every value to a [`DefaultVisitor`] wrapped so that it
/// is written escaped.
#[derive(Debug)]
pub struct EscapingVisitor<'a>(DefaultVisitor<'a>);

/// Debug-formats its value through an [`EscapingWriter`].
struct EscapedDebug<T>(T);

impl<T: fmt::Debug> fmt::Debug for EscapedDebug<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Write::write_fmt(&mut EscapingWriter(f), format_args!("{:?}", self.0))
    }
}

/// An error and its sources, as [`DefaultVisitor`] writes them (`error name.sources=[a, b]`).
struct ErrorChain<'a> {
    name: &'a str,
    error: &'a (dyn std::error::Error + 'static),
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        let mut source = self.error.source();
        if source.is_some() {
            write!(f, " {}.sources=[", self.name)?;
        }
        let mut first = true;
        while let Some(error) = source {
            write!(f, "{}{error}", if first { "" } else { ", " })?;
            first = false;
            source = error.source();
        }
        if first { Ok(()) } else { f.write_str("]") }
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.record_debug(field, &EscapedDebug(format_args!("{value}")));
        } else {
            self.0.record_debug(field, &EscapedDebug(value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.record_debug(field, &EscapedDebug(ErrorChain { name: field.name(), error: value }));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.record_debug(field, &EscapedDebug(value));
    }
}

impl VisitOutput<fmt::Result> for EscapingVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.0.finish()
    }
}

impl VisitFmt for EscapingVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        self.0.writer()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {0:?}\nforged line")]
    struct Outer(String, #[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner\u{1b}[2J")]
    struct Inner;

    /// The text lines the default fields or [`EscapedFields`] write for a hostile event.
    fn text_log(escaped: bool) -> String {
        let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buffer.clone();
        let writer = move || SharedWriter(sink.clone());
        let builder = tracing_subscriber::fmt().with_writer(writer).with_ansi(false).without_time();
        let log = || {
            let name = "csr-1\nINFO forged: approved \u{1b}[31m\u{202e}";
            let error = Outer("x\ry".into(), Inner);
            tracing::warn!(csr = %name, node = name, list = ?[name], error = &error as &dyn std::error::Error, "about {name}");
        };
        if escaped {
            tracing::subscriber::with_default(builder.fmt_fields(EscapedFields::default()).finish(), log);
        } else {
            tracing::subscriber::with_default(builder.finish(), log);
        }
        String::from_utf8(buffer.lock().map(|b| b.clone()).unwrap_or_default()).unwrap_or_default()
    }

    struct SharedWriter(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for SharedWriter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_text_field_and_the_message_are_escaped() {
        assert!(text_log(false).lines().count() > 1, "the default fields let a name forge lines");
        let text = text_log(true);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.trim_end().chars().any(crate::display::needs_escape), "{text:?}");
        let line = text.trim_end();
        for part in [
            r"about csr-1\nINFO forged: approved \u{1b}[31m\u{202e}",
            r"csr=csr-1\nINFO forged: approved \u{1b}[31m\u{202e}",
            r#"node="csr-1\nINFO forged: approved \u{1b}[31m\u{202e}""#,
            r#"list=["csr-1\nINFO forged: approved \u{1b}[31m\u{202e}"]"#,
            r#"error=cannot read "x\ry"\nforged line error.sources=[inner\u{1b}[2J]"#,
        ] {
            assert!(line.contains(part), "{part}\nnot in\n{line}");
        }
    }
}
