//! The capacity gauges with upstream's names and HELP texts (component-base prefixes ALPHA
//! metrics' help with "[ALPHA] "); no labels, as upstream.

use prometheus::{IntGauge, Registry};

/// `csistoragecapacities_desired_goal`, `_desired_current` and `csistoragecapacities_obsolete`.
#[derive(Debug, Clone)]
pub(crate) struct CapacityMetrics {
    goal: IntGauge,
    current: IntGauge,
    obsolete: IntGauge,
}

/// Registration failed: a family was registered twice (a programming error).
#[derive(Debug, thiserror::Error)]
#[error("cannot register the capacity metrics")]
pub(crate) struct Error(#[source] prometheus::Error);

impl CapacityMetrics {
    /// Creates the gauges and registers them in `registry`.
    pub(crate) fn register(registry: &Registry) -> Result<Self, Error> {
        let gauge = |name: &str, help: &str| -> Result<IntGauge, Error> {
            let gauge = IntGauge::new(name, format!("[ALPHA] {help}")).map_err(Error)?;
            registry.register(Box::new(gauge.clone())).map_err(Error)?;
            Ok(gauge)
        };
        Ok(Self {
            goal: gauge(
                "csistoragecapacities_desired_goal",
                "Number of CSIStorageCapacity objects that are supposed to be managed automatically.",
            )?,
            current: gauge(
                "csistoragecapacities_desired_current",
                "Number of CSIStorageCapacity objects that exist and are supposed to be managed automatically.",
            )?,
            obsolete: gauge(
                "csistoragecapacities_obsolete",
                "Number of CSIStorageCapacity objects that exist and will be deleted automatically. Objects that exist and may need an update are not considered obsolete and therefore not included in this value.",
            )?,
        })
    }

    /// Sets all three from one look at the caches.
    pub(crate) fn set(&self, goal: usize, current: usize, obsolete: usize) {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.goal.set(n(goal));
        self.current.set(n(current));
        self.obsolete.set(n(obsolete));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn the_gauges_render_with_upstreams_names_and_help() {
        let registry = Registry::new();
        let metrics = CapacityMetrics::register(&registry).unwrap();
        metrics.set(6, 4, 1);
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            "# HELP csistoragecapacities_desired_goal [ALPHA] Number of CSIStorageCapacity objects that are supposed to be managed automatically.",
            "# TYPE csistoragecapacities_desired_goal gauge",
            "csistoragecapacities_desired_goal 6",
            "csistoragecapacities_desired_current 4",
            "csistoragecapacities_obsolete 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
