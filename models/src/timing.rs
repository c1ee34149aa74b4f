//! The timing-only workload: parameters exist only as a count, so messages have their real size
//! but nothing is computed. For throughput and scale studies up to thousands of nodes.

use crate::profile::Profile;
use crate::{Evaluation, GradRequest, Workload};

/// A model of `params` parameters that does no arithmetic.
#[derive(Clone, Debug)]
pub struct TimingWorkload {
    params: usize,
    profile: Option<Profile>,
}

impl TimingWorkload {
    /// A timing workload with `params` parameters (ResNet-18: 11,689,512).
    pub fn new(params: usize) -> Self {
        TimingWorkload { params, profile: None }
    }

    /// The same with a backward profile (its layers are laid over the `params` in proportion).
    pub fn with_profile(self, profile: Profile) -> Self {
        TimingWorkload { profile: Some(profile), ..self }
    }
}

impl Workload for TimingWorkload {
    fn name(&self) -> &str {
        "timing"
    }
    fn param_count(&self) -> usize {
        self.params
    }
    fn timing_only(&self) -> bool {
        true
    }
    fn profile(&self) -> Profile {
        self.profile.clone().unwrap_or_else(|| Profile::flat(self.params))
    }
    fn init(&self) -> Vec<f32> {
        Vec::new()
    }
    fn gradient(&self, _params: &[f32], _req: GradRequest, _grad: &mut [f32]) -> f64 {
        f64::NAN
    }
    fn evaluate(&self, _params: &[f32]) -> Evaluation {
        Evaluation { loss: f64::NAN, accuracy: None }
    }
}
