//! The runtime's configuration errors: the field's path relative to the configuration that
//! checked it, and what is wrong. A layer that holds that configuration under a name adds the
//! name ([`ConfigError::under`]), so the command line reports the path as the user wrote it.

use dsgd_sim::error::FieldPath;

/// A value the runtime refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {problem}")]
pub struct ConfigError {
    /// Path of the field, relative to the configuration that was checked (`lr`, `shards`).
    pub field: FieldPath,
    /// What is wrong and what is allowed.
    pub problem: String,
}

impl ConfigError {
    /// `field` is wrong: `problem`.
    pub fn new(field: impl Into<FieldPath>, problem: impl Into<String>) -> Self {
        ConfigError { field: field.into(), problem: problem.into() }
    }
    /// The same error seen from the configuration that holds the checked one as `name`.
    pub fn under(self, name: &str) -> Self {
        ConfigError { field: self.field.under(name), ..self }
    }
}

impl From<ConfigError> for dsgd_sim::SimError {
    fn from(e: ConfigError) -> Self {
        dsgd_sim::SimError::config(e.field, e.problem)
    }
}

impl From<dsgd_sim::SimError> for ConfigError {
    fn from(e: dsgd_sim::SimError) -> Self {
        match e.into_field_problem() {
            Ok((field, problem)) => ConfigError { field, problem },
            Err(other) => ConfigError { field: FieldPath::default(), problem: other.to_string() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_adds_its_name_to_the_path() {
        let e = ConfigError::new("schedule.every", "must be at least 1").under("optimizer");
        assert_eq!(e.field, "optimizer.schedule.every");
        assert_eq!(e.to_string(), "`optimizer.schedule.every`: must be at least 1");
    }
}
