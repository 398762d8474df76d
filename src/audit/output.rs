//! The audit's reports, as a table for people (every value from a certificate or a Node escaped,
//! [`Escaped`]) or as JSON lines for tools (one object per Node, exact).

use std::io::Write;

use super::NodeAudit;
use crate::display::Escaped;
use crate::values::Format;

/// Writes `reports` to `out` in `format`.
pub fn write(out: &mut impl Write, reports: &[NodeAudit], format: Format) -> std::io::Result<()> {
    match format {
        Format::Text => write_table(out, reports),
        Format::Json => {
            for report in reports {
                serde_json::to_writer(&mut *out, report)?;
                writeln!(out)?;
            }
            Ok(())
        }
    }
}

/// A table of one line per Node, then the details of each Node that has findings.
fn write_table(out: &mut impl Write, reports: &[NodeAudit]) -> std::io::Result<()> {
    let rows: Vec<[String; 7]> = reports.iter().map(row).collect();
    let header = ["NODE", "STATE", "ADDRESS", "ISSUER", "EXPIRES (LEFT)", "KEY", "POLICY"].map(str::to_owned);
    let mut widths = header.clone().map(|cell| cell.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    for report in reports.iter().filter(|report| !report.findings.is_empty()) {
        let findings: Vec<&str> = report.findings.iter().map(|finding| finding.as_str()).collect();
        writeln!(out, "\n{}: {}", Escaped(&report.node), findings.join(", "))?;
        if let Some(detail) = &report.detail {
            writeln!(out, "  {}", Escaped(detail))?;
        }
        if let Some(certificate) = &report.certificate {
            writeln!(out, "  subject: {}", Escaped(&certificate.subject))?;
            writeln!(
                out,
                "  names: DNS {:?}, IP {:?}; CN is system:node:<name>: {}",
                certificate.names.dns_names,
                certificate.names.ip_addresses,
                if report.cn_is_node == Some(true) { "yes" } else { "no" }
            )?;
        }
        if let Some(error) = &report.verify_error {
            writeln!(out, "  --kubelet-serving-ca-file: {}", Escaped(error))?;
        }
        for failed in report.policy.iter().flat_map(|policy| &policy.failed) {
            writeln!(out, "  policy: {}", Escaped(failed))?;
        }
    }
    Ok(())
}

fn row(report: &NodeAudit) -> [String; 7] {
    let address = report.address.map_or("-".to_owned(), |address| address.to_string());
    let (issuer, expires, key) = match &report.certificate {
        Some(certificate) => {
            let left = report.seconds_left.map_or(String::new(), left);
            let issuer = match report.verified {
                Some(true) => format!("{} (verified)", certificate.issuer),
                _ => certificate.issuer.clone(),
            };
            (issuer, format!("{} ({left})", certificate.not_after.strftime("%Y-%m-%dT%H:%MZ")), certificate.key.clone())
        }
        None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
    };
    let policy = report.policy.as_ref().map_or("-".to_owned(), |p| format!("{} ({})", p.decision, p.reason));
    [&report.node, report.state, &address, &issuer, &expires, &key, &policy].map(|cell| Escaped(cell).to_string())
}

/// Time left, in the largest whole unit: `29d`, `5h`, `12m`, `40s`, `expired`.
fn left(seconds: i64) -> String {
    match seconds {
        ..=0 => "expired".to_owned(),
        86_400.. => format!("{}d", seconds / 86_400),
        3_600.. => format!("{}h", seconds / 3_600),
        60.. => format!("{}m", seconds / 60),
        _ => format!("{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_is_shown_in_its_largest_whole_unit() {
        let shown = [-5, 0, 59, 61, 7_200, 30 * 86_400 + 5].map(left);
        assert_eq!(shown, ["expired", "expired", "59s", "1m", "2h", "30d"]);
    }
}
