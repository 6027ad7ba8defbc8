//! The run's report: a summary, the violations with history excerpts, JSON,
//! and an SVG picture of the leadership timeline.
//!
//! The SVG is written by hand: a few hundred rectangles and labels do not
//! warrant a plotting dependency.

use std::fmt::Write as _;
use std::path::Path;

use crate::check::Report;

pub fn print(r: &Report) {
    println!("\n== tenure-chaos report (seed {})", r.seed);
    println!("duration {:.1}s, ttl {:.0}ms", r.duration_s, r.ttl_ms);
    let faults: Vec<String> = r
        .faults_by_kind
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!(
        "faults injected: {} ({})",
        r.faults_by_kind.values().sum::<usize>(),
        faults.join(", ")
    );
    println!(
        "acquisitions {}, handovers {}, leader-only writes {} ({} rejected by the fence)",
        r.acquisitions, r.handovers, r.writes, r.rejected_writes
    );
    match (r.heal_p50_ms, r.heal_p99_ms) {
        (Some(p50), Some(p99)) => println!(
            "leader acting after a fault healed: p50 {p50:.0}ms, p99 {p99:.0}ms (n={})",
            r.heal_ms.len()
        ),
        _ => println!("leader acting after a fault healed: no samples"),
    }
    println!(
        "lost() latest after its deadline: {:.1}ms",
        r.max_lost_late_ms
    );
    println!("violations: {}", r.violations.len());
    for v in r.violations.iter().take(10) {
        println!(
            "\n  VIOLATION [{}] at {:+.3}s: {}",
            v.check, v.at_s, v.message
        );
        for line in v.excerpt.iter().take(40) {
            println!("    {line}");
        }
    }
    if r.violations.len() > 10 {
        println!("\n  ... {} more in report.json", r.violations.len() - 10);
    }
}

pub fn write(r: &Report, out: &Path) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(out.join("report.json"), json)?;
    std::fs::write(out.join("timeline.svg"), svg(r))?;
    Ok(())
}

fn svg(r: &Report) -> String {
    let mut cands: Vec<String> = r.intervals.iter().map(|i| i.cand.clone()).collect();
    for f in &r.faults {
        if f.target != "store" {
            cands.push(f.target.clone());
        }
    }
    cands.sort();
    cands.dedup();
    let width = 1600.0;
    let left = 60.0;
    let row = 28.0;
    let height = 60.0 + row * (cands.len() as f64 + 1.0);
    let span = (r.end.saturating_sub(r.start)).max(1) as f64;
    let x = |t: u64| left + (t.saturating_sub(r.start) as f64 / span) * (width - left - 10.0);
    let y = |cand: &str| 30.0 + row * cands.iter().position(|c| c == cand).unwrap_or(0) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">"##
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="white"/><text x="4" y="16">tenure-chaos seed {} - {:.0}s, ttl {:.0}ms - leader belief intervals by term; faults: red kill, grey stop, orange network, purple store restart, blue clock</text>"##,
        r.seed, r.duration_s, r.ttl_ms
    );
    // Time axis: ten ticks labelled in seconds since the start.
    let axis_y = height - 22.0;
    for i in 0..=10 {
        let t = r.start + (span * i as f64 / 10.0) as u64;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{axis_y:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{:.0}s</text>"##,
            axis_y + 5.0,
            axis_y + 16.0,
            (t - r.start) as f64 / 1e9,
            x = x(t)
        );
    }
    for c in &cands {
        let _ = writeln!(
            s,
            r##"<text x="4" y="{:.1}">{c}</text><line x1="{left}" x2="{width}" y1="{:.1}" y2="{:.1}" stroke="#eee"/>"##,
            y(c) + 16.0,
            y(c) + row,
            y(c) + row
        );
    }
    for f in &r.faults {
        let color = match f.kind.as_str() {
            "kill" => "#e33",
            "stop" => "#888",
            "clock" => "#36c",
            "restart" => "#a3c",
            _ => "#f90",
        };
        let (y0, h) = if f.target == "store" {
            (30.0, row * cands.len() as f64)
        } else {
            (y(&f.target) + 20.0, 6.0)
        };
        let w = (x(f.heal) - x(f.start)).max(2.0);
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{y0:.1}" width="{w:.1}" height="{h:.1}" fill="{color}" opacity="0.45"><title>{} {}: {}</title></rect>"##,
            x(f.start),
            f.kind,
            f.target,
            f.detail
        );
    }
    for iv in &r.intervals {
        let hue = (iv.term * 47) % 360;
        let w = (x(iv.end) - x(iv.start)).max(1.0);
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="16" fill="hsl({hue},70%,55%)"><title>{}#{} term {}</title></rect>"##,
            x(iv.start),
            y(&iv.cand) + 2.0,
            iv.cand,
            iv.inc,
            iv.term
        );
    }
    for v in &r.violations {
        let vx = x(r.start + (v.at_s * 1e9) as u64);
        let _ = writeln!(
            s,
            r##"<line x1="{vx:.1}" x2="{vx:.1}" y1="24" y2="{height}" stroke="black" stroke-width="2" stroke-dasharray="4 2"><title>{}: {}</title></line>"##,
            v.check, v.message
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}
