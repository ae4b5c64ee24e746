//! manyfold: tokio driver and public API.
