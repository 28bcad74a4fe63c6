//! The echo benchmark's plot: req/s (top row) and server CPU per request (bottom row)
//! against connections, one column per message length, one line per server. SVG only.

use std::io;
use std::path::Path;

use plotters::prelude::*;

use crate::cell::Cell;

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes the plot of `cells` to `path`.
pub fn write_svg(cells: &[Cell], path: &Path) -> io::Result<()> {
    let mut lens: Vec<usize> = cells.iter().map(|c| c.shape.len).collect();
    lens.sort_unstable();
    lens.dedup();
    let width = 520 * lens.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 760)).into_drawing_area();
    draw(&root, cells, &lens).map_err(|e| io::Error::other(format!("plot: {e}")))?;
    root.present()
        .map_err(|e| io::Error::other(format!("plot: {e}")))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn draw(root: &Area, cells: &[Cell], lens: &[usize]) -> Result<()> {
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, lens.len().max(1)));
    for (i, &len) in lens.iter().enumerate() {
        let these: Vec<&Cell> = cells.iter().filter(|c| c.shape.len == len).collect();
        let rate = Metric {
            caption: format!("req/s, {len}-byte messages"),
            value: |c: &Cell| c.load.req_per_s,
        };
        let cpu = Metric {
            caption: format!("server CPU us/request, {len} B"),
            value: Cell::cpu_us_per_req,
        };
        panel(&panels[i], &these, &rate)?;
        panel(&panels[lens.len() + i], &these, &cpu)?;
    }
    Ok(())
}

struct Metric<F> {
    caption: String,
    value: F,
}

fn panel<F: Fn(&Cell) -> f64>(area: &Area, cells: &[&Cell], metric: &Metric<F>) -> Result<()> {
    let x_max = cells
        .iter()
        .map(|c| c.shape.conns)
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let y_max = cells.iter().map(|c| (metric.value)(c)).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(&metric.caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..y_max.max(1e-9))?;
    chart
        .configure_mesh()
        .x_desc("connections")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let mut servers: Vec<&str> = Vec::new();
    for c in cells {
        if !servers.contains(&c.server.as_str()) {
            servers.push(&c.server);
        }
    }
    for (i, server) in servers.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points: Vec<(f64, f64)> = cells
            .iter()
            .filter(|c| c.server == *server)
            .map(|c| (c.shape.conns as f64, (metric.value)(c)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(*server)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
