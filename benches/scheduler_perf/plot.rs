//! The report's plot: pods/s per workload and contender, the median as a bar and the rounds'
//! range as a whisker, written as SVG beside target/bench/report.md.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::contenders::Contender;
use super::report::{Spread, Summary};

/// One workload's throughput per contender (`None`: failed or not run).
pub struct Workload {
    pub name: &'static str,
    pub pods_per_second: Vec<(Contender, Option<Spread>)>,
}

impl Workload {
    pub fn of(name: &'static str, results: &[(Contender, Result<Summary, String>)]) -> Workload {
        Workload {
            name,
            pods_per_second: results
                .iter()
                .map(|(c, r)| (*c, r.as_ref().ok().map(|s| s.pods_per_second)))
                .collect(),
        }
    }
}

pub fn colour(c: Contender) -> RGBColor {
    match c {
        Contender::Ksched => RGBColor(0xd9, 0x5f, 0x02),
        Contender::KschedJemalloc => RGBColor(0xe6, 0xab, 0x02),
        Contender::KschedGlibc => RGBColor(0x75, 0x70, 0xb3),
        Contender::KschedBase => RGBColor(0xe7, 0x29, 0x8a),
        Contender::Upstream => RGBColor(0x1b, 0x9e, 0x77),
        Contender::Ceiling => RGBColor(0x99, 0x99, 0x99),
    }
}

/// Horizontal bars, one band per workload, one bar per contender in the band.
pub fn pods_per_second(
    path: &Path,
    preset: &str,
    rounds: usize,
    workloads: &[Workload],
) -> Result<(), Box<dyn std::error::Error>> {
    let contenders: Vec<Contender> = workloads
        .first()
        .map(|w| w.pods_per_second.iter().map(|(c, _)| *c).collect())
        .unwrap_or_default();
    let per_band = contenders.len().max(1) as f64 + 1.0;
    let bands = workloads.len().max(1) as f64;
    let max = workloads
        .iter()
        .flat_map(|w| {
            w.pods_per_second
                .iter()
                .filter_map(|(_, s)| s.map(|s| s.max))
        })
        .fold(1.0_f64, f64::max);
    let height = (120 + workloads.len() * 22 * contenders.len().max(1)) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "pods/s per workload, preset {preset} (median of {rounds} rounds, whisker: range)"
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(330)
        .build_cartesian_2d(0.0..max * 1.08, 0.0..bands * per_band)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("pods/s")
        .draw()?;
    // The first workload at the top: bands count from the bottom of the y axis.
    let row = |band: usize| (workloads.len() - 1 - band) as f64;
    for (i, c) in contenders.iter().enumerate() {
        let bars = workloads.iter().enumerate().filter_map(|(band, w)| {
            let spread = w.pods_per_second.get(i)?.1?;
            let top = row(band) * per_band + 0.5 + i as f64;
            Some((spread, top))
        });
        let style = colour(*c).filled();
        chart
            .draw_series(
                bars.clone()
                    .map(|(s, top)| Rectangle::new([(0.0, top), (s.median, top + 0.9)], style)),
            )?
            .label(c.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], style));
        chart.draw_series(bars.map(|(s, top)| {
            let mid = top + 0.45;
            PathElement::new(vec![(s.min, mid), (s.max, mid)], BLACK.stroke_width(2))
        }))?;
    }
    // The workloads' names beside their bands, right-aligned against the axis.
    let name_style = ("sans-serif", 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (band, w) in workloads.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, (row(band) + 0.5) * per_band));
        root.draw(&Text::new(w.name, (x - 6, y), name_style.clone()))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}
