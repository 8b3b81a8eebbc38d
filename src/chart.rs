//! SVG line charts for the binary's reports (`simulate`, `bench overload`): panels stacked
//! over one time axis, phases marked by vertical lines.

use plotters::prelude::*;
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

/// Draws `panels` stacked over `0..end` seconds with vertical lines at `marks`.
pub fn draw(path: &Path, end: f64, marks: &[f64], panels: Vec<Panel>) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let height = 300 * panels.len() as u32;
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(panels) {
        let y = panel.y;
        let mut c = ChartBuilder::on(area)
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
        for &at in marks {
            c.draw_series(LineSeries::new(
                [(at, y.start), (at, y.end)],
                BLACK.mix(0.3),
            ))
            .map_err(|e| err(&e))?;
        }
        for s in panel.series {
            let color = s.color;
            let clipped = s
                .points
                .into_iter()
                .map(|(x, v)| (x, v.clamp(y.start, y.end)));
            c.draw_series(LineSeries::new(clipped, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(s.name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
