//! SVG line charts for the binary's reports (`simulate`, `bench overload`): panels stacked
//! over one time axis, phases marked by vertical lines and named on the axis, legends beside
//! the data.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;

/// The tiers' colours, in `Tier::ALL` order.
pub const TIER_COLORS: [RGBColor; 4] = [RED, BLUE, GREEN, RGBColor(160, 160, 160)];

/// One line.
pub struct Series {
    /// Its legend.
    pub name: String,
    /// Its colour.
    pub color: RGBColor,
    /// (seconds, value).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A named line.
    pub fn new(name: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            color,
            points,
        }
    }
}

/// One panel: a title, the range of its y axis, its lines.
pub struct Panel {
    /// Its caption.
    pub title: String,
    /// The y axis.
    pub y: Range<f64>,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Width of the column on the right of each panel that holds its legend, outside the data.
const LEGEND_WIDTH: u32 = 190;

/// Draws `panels` stacked over `0..end` seconds, each phase (its start, its name) marked by a
/// vertical line and its name; each panel's legend sits to the right of its data. A point
/// that is not a number (a second with nothing to measure) breaks its line instead of being
/// drawn as 0.
pub fn draw(
    path: &Path,
    end: f64,
    phases: &[(f64, String)],
    panels: Vec<Panel>,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let height = 300 * panels.len() as u32;
    let width = 1200 + LEGEND_WIDTH;
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(panels) {
        let (plot, legend) = area.split_horizontally(width - LEGEND_WIDTH);
        let y = panel.y;
        let mut c = ChartBuilder::on(&plot)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..end.max(1.0), y.clone())
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("seconds")
            .draw()
            .map_err(|e| err(&e))?;
        // Each phase's name stands on the time axis, at its start.
        let bottom = y.start + (y.end - y.start) * 0.02;
        for (at, name) in phases {
            if *at > 0.0 {
                c.draw_series(LineSeries::new(
                    [(*at, y.start), (*at, y.end)],
                    BLACK.mix(0.3),
                ))
                .map_err(|e| err(&e))?;
            }
            c.draw_series(std::iter::once(Text::new(
                format!(" {name}"),
                (*at, bottom),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK.mix(0.7))
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            )))
            .map_err(|e| err(&e))?;
        }
        for (i, s) in panel.series.into_iter().enumerate() {
            let color = s.color;
            for run in finite_runs(&s.points) {
                let clipped = run.iter().map(|&(x, v)| (x, v.clamp(y.start, y.end)));
                c.draw_series(LineSeries::new(clipped, color.stroke_width(2)))
                    .map_err(|e| err(&e))?;
            }
            let row = 40 + 20 * i as i32;
            legend
                .draw(&PathElement::new(
                    [(8, row), (32, row)],
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?;
            legend
                .draw(&Text::new(
                    s.name,
                    (38, row - 7),
                    ("sans-serif", 14).into_font(),
                ))
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))
}

/// The runs of `points` between those whose value is not a number.
fn finite_runs(points: &[(f64, f64)]) -> Vec<&[(f64, f64)]> {
    points
        .split(|p| !p.1.is_finite())
        .filter(|run| !run.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_breaks_where_there_is_nothing_to_measure() {
        let points = [(0.0, 1.0), (1.0, f64::NAN), (2.0, 2.0), (3.0, 3.0)];
        let runs = finite_runs(&points);
        assert_eq!(runs, vec![&points[..1], &points[2..]]);
    }

    #[test]
    fn phases_and_legends_are_labelled() {
        let dir = std::env::temp_dir().join(format!("brownout-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.svg");
        let panel = Panel {
            title: "t".into(),
            y: 0.0..10.0,
            series: vec![Series::new("served", BLUE, vec![(0.0, 1.0), (5.0, 20.0)])],
        };
        let phases = [(0.0, "0.5C".to_owned()), (3.0, "2C".to_owned())];
        draw(&path, 6.0, &phases, vec![panel]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for label in ["0.5C", "2C", "served"] {
            assert!(svg.contains(label), "{label}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
