//! The service-time CDF plot of `disk validate --plot`: a small hand-written
//! SVG (no plotting dependency, byte-for-byte deterministic).

use crate::report::{percentile, ValidateReport};
use crate::HddError;
use std::fmt::Write as _;
use std::path::Path;

const WIDTH_PX: f64 = 760.0;
const HEIGHT_PX: f64 = 480.0;
const MARGIN_LEFT_PX: f64 = 70.0;
const MARGIN_RIGHT_PX: f64 = 20.0;
const MARGIN_TOP_PX: f64 = 40.0;
const MARGIN_BOTTOM_PX: f64 = 55.0;

/// Draw the measured and model service-time CDFs of `report` into an SVG file.
pub fn write_cdf_svg(report: &ValidateReport, path: &Path) -> Result<(), HddError> {
    let svg = cdf_svg(report);
    std::fs::write(path, svg).map_err(|source| HddError::Io { path: path.to_path_buf(), source })
}

fn cdf_svg(report: &ValidateReport) -> String {
    assert!(!report.measured_sorted_ms.is_empty());
    assert!(!report.model_sorted_ms.is_empty());
    // Clip the x axis at the larger 99th percentile so the tail does not squash the body.
    let x_max_ms = nice_ceiling(
        percentile(&report.measured_sorted_ms, 99).max(percentile(&report.model_sorted_ms, 99)) * 1.05,
    );
    let plot_w = WIDTH_PX - MARGIN_LEFT_PX - MARGIN_RIGHT_PX;
    let plot_h = HEIGHT_PX - MARGIN_TOP_PX - MARGIN_BOTTOM_PX;
    let x_px = |ms: f64| MARGIN_LEFT_PX + (ms.min(x_max_ms) / x_max_ms) * plot_w;
    let y_px = |fraction: f64| MARGIN_TOP_PX + (1.0 - fraction) * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}: service-time CDF, demerit {:.3} ms (DiskSim's rms), {:.3} ms (1% steps)</text>"#,
        WIDTH_PX / 2.0,
        escape(&report.name),
        report.demerit_disksim_ms,
        report.demerit_ms
    );
    for tick in 0..=10 {
        let ms = x_max_ms * f64::from(tick) / 10.0;
        let fraction = f64::from(tick) / 10.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#ddd"/><text x="{x:.1}" y="{label}" text-anchor="middle">{ms:.1}</text>"##,
            x = x_px(ms),
            top = MARGIN_TOP_PX,
            bottom = MARGIN_TOP_PX + plot_h,
            label = MARGIN_TOP_PX + plot_h + 16.0
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#ddd"/><text x="{label}" y="{ty:.1}" text-anchor="end">{fraction:.1}</text>"##,
            left = MARGIN_LEFT_PX,
            right = MARGIN_LEFT_PX + plot_w,
            y = y_px(fraction),
            ty = y_px(fraction) + 4.0,
            label = MARGIN_LEFT_PX - 6.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">service time (ms)</text>"#,
        MARGIN_LEFT_PX + plot_w / 2.0,
        HEIGHT_PX - 12.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">fraction of requests</text>"#,
        MARGIN_TOP_PX + plot_h / 2.0,
        MARGIN_TOP_PX + plot_h / 2.0
    );
    for (values, color, label, row) in [
        (&report.measured_sorted_ms, "#1f77b4", "measured", 0.0),
        (&report.model_sorted_ms, "#d62728", "model", 1.0),
    ] {
        let mut points = String::new();
        for percent in 1..=100u32 {
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x_px(percentile(values, percent)),
                y_px(f64::from(percent) / 100.0)
            );
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.trim_end()
        );
        let legend_y = MARGIN_TOP_PX + plot_h - 40.0 + row * 18.0;
        let legend_x = MARGIN_LEFT_PX + plot_w - 150.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{legend_x}" y1="{legend_y}" x2="{}" y2="{legend_y}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{label}</text>"#,
            legend_x + 24.0,
            legend_x + 30.0,
            legend_y + 4.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Round up to 1, 2 or 5 times a power of ten.
fn nice_ceiling(value: f64) -> f64 {
    if !(value.is_finite() && value > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|step| step * power)
        .find(|candidate| *candidate >= value)
        .unwrap_or(10.0 * power)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
