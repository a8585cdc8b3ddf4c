//! Least-squares slope of memory over time.
//!
//! A soak's question is whether memory keeps climbing once the caches are
//! warm, so the fit uses only post-warmup samples and reports bytes per hour,
//! the unit a limit like `DW_PERF_MAX_MEMORY_SLOPE_BYTES_PER_HOUR` is
//! written in.

/// A fitted line `bytes = intercept + slope * seconds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Bytes per second.
    pub slope_per_second: f64,
    /// Bytes at second 0.
    pub intercept: f64,
    /// Points used.
    pub points: usize,
}

impl Fit {
    /// The slope in bytes per hour.
    pub fn bytes_per_hour(&self) -> f64 {
        self.slope_per_second * 3600.0
    }
}

/// Fits `(seconds, bytes)` points; `None` with fewer than two distinct times.
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    Some(Fit {
        slope_per_second: slope,
        intercept: mean_y - slope * mean_x,
        points: points.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_fits_exactly() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64, 100.0 + 2.0 * i as f64))
            .collect();
        let fit = fit(&points).unwrap();
        assert!((fit.slope_per_second - 2.0).abs() < 1e-9);
        assert!((fit.intercept - 100.0).abs() < 1e-9);
        assert!((fit.bytes_per_hour() - 7200.0).abs() < 1e-6);
    }

    #[test]
    fn too_few_or_degenerate_points_fit_nothing() {
        assert_eq!(fit(&[(1.0, 2.0)]), None);
        assert_eq!(fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }
}
