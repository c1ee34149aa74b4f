//! Which pages back the process's memory: small (4 KiB) ones by default, transparent huge pages
//! (2 MiB) for the workloads whose gradients run faster on them.
//!
//! mimalloc asks for huge pages on its whole arena, so the first touch of any 2 MiB of the heap
//! made the kernel clear all of it. A 100-node timing run held 53 MB for a few of data, and a
//! fresh 100-worker paper-cluster run (MLP replicas) spent half of its 0.5-1.0 s start-up
//! clearing pages; with small pages it started in 0.24-0.35 s, its peak was 15-30 MB lower and
//! its gradients a second the same. Convolutional networks are the exception: ResNet-20's
//! gradient ran 7-12% faster on huge pages (its activations are megabytes), so a spec or a
//! benchmark of one turns them back on (docs/performance.md). Pages change no result, only the
//! speed; where the kernel refuses, nothing changes.

use dsgd_models::nets::NetKind;
use dsgd_models::spec::WorkloadSpec;

/// Small pages from now on (the program's default, set at its start).
pub fn small() {
    huge(false);
}

/// The pages for a run of `workload`: those of its network ([`for_net`]), small ones for the
/// workloads without one.
pub fn for_workload(workload: &WorkloadSpec) {
    match workload {
        WorkloadSpec::Burn { model, .. } => for_net(&model.net_kind(Vec::new())),
        _ => small(),
    }
}

/// The pages for the gradients of `kind`: huge ones for a convolutional network, small ones for
/// the MLP.
pub fn for_net(kind: &NetKind) {
    huge(!matches!(kind, NetKind::Mlp { .. }));
}

/// Transparent huge pages on (`true`) or off for this process's later page faults (and for the
/// processes it starts).
fn huge(on: bool) {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(!on);
    #[cfg(not(target_os = "linux"))]
    let _ = on;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The kernel's flag follows the network: off for the MLP and for workloads without a network,
    /// on for the convolutional nets.
    #[test]
    fn convolutional_networks_get_huge_pages_and_the_rest_small_ones() {
        for (kind, huge) in
            [(NetKind::Mlp { hidden: vec![128] }, false), (NetKind::Cnn, true), (NetKind::ResNet20, true)]
        {
            for_net(&kind);
            assert_eq!(nix::sys::prctl::get_thp_disable().expect("prctl"), !huge, "{kind:?}");
        }
        for (json, huge) in [
            (r#"{"kind": "burn", "model": "resnet20"}"#, true),
            (r#"{"kind": "burn", "model": "mlp"}"#, false),
            (r#"{"kind": "burn", "model": "cnn"}"#, true),
            (r#"{"kind": "timing", "params": 1000}"#, false),
        ] {
            let workload: WorkloadSpec = serde_json::from_str(json).expect("a workload");
            for_workload(&workload);
            assert_eq!(nix::sys::prctl::get_thp_disable().expect("prctl"), !huge, "{json}");
        }
        small();
        assert!(nix::sys::prctl::get_thp_disable().expect("prctl"));
    }
}
