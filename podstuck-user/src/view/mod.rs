//! The live view of `podstuck watch` on a terminal, and the plain text that
//! goes with it: the summary printed at exit, fit to paste into an
//! incident channel (the live printer of `print` shows both).
//!
//! Split so that what to show is tested without a terminal: [`model`]
//! decides what the screen says from findings, latency series, calls in
//! flight, totals and a clock (pure); [`render`] lays a [`model::Screen`]
//! out with ratatui, its words fitted to the width by [`fit`]; [`text`]
//! writes the summary; [`terminal`] owns the real terminal (raw mode,
//! alternate screen, keys, restoring it on every exit and on panic). Nothing here reads the node or the kernel:
//! `watch` hands in what it gathered.

pub mod fit;
pub mod model;
pub mod render;
pub mod terminal;
pub mod text;

pub use model::{LiveView, Moment, RunHeading, Screen};
pub use terminal::{LiveTerminal, Quit, QuitKeys};
