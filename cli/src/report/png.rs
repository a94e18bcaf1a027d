//! The SVG picture rasterized with resvg: PNG for embedding and for notebooks, with no
//! browser.

use base64::Engine as _;

use super::run::Run;
use super::ReportError;

/// The run's picture as PNG bytes, `width` pixels wide.
///
/// # Errors
/// [`ReportError::Render`] if the picture cannot be rasterized.
pub fn png(run: &Run, width: u32) -> Result<Vec<u8>, ReportError> {
    let svg = super::svg(run, width);
    let mut options = resvg::usvg::Options::default();
    options.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(&svg, &options)
        .map_err(|e| ReportError::Render(e.to_string()))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
            ReportError::Render(format!("no {}x{} image", size.width(), size.height()))
        })?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| ReportError::Render(e.to_string()))
}

/// The run's picture as base64 PNG, for a notebook cell
/// (`IPython.display.Image(base64.b64decode(...))` or an `<img src="data:image/png;base64,...">`).
///
/// # Errors
/// See [`Run::read`] and [`png`].
pub fn png_base64(dir: &std::path::Path, width: u32) -> Result<String, ReportError> {
    let png = png(&Run::read(dir)?, width)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(png))
}
