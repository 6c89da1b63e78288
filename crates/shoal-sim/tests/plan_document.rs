//! `shoal-sim plan --plan FILE.json`: a plan document simulates to the time
//! of the algorithm that wrote it, and the report names its call.

use std::process::Command;

use shoal_plan::{algorithms, CallPlans, CallShape, Collective};

fn time_s(report: &str) -> f64 {
    let at = report.find("\"time_s\": ").unwrap() + 10;
    let end = report[at..].find(',').unwrap();
    report[at..at + end].parse().unwrap()
}

#[test]
fn a_plan_document_simulates_to_its_algorithms_time() {
    let shape = CallShape {
        collective: Collective::Allreduce,
        world: 8,
        count: 1 << 18,
        root: 0,
        chunk: 1 << 18,
        ranks_per_host: 1,
        counts: None,
    };
    let ring = algorithms::find(Collective::Allreduce, "ring").unwrap();
    let doc = CallPlans {
        plans: (0..8).map(|r| (ring.generate)(&shape, r)).collect(),
        algorithm: Some("allreduce/ring".into()),
        shape,
    };
    let path = std::env::temp_dir().join(format!("shoal-plan-doc-{}.json", std::process::id()));
    std::fs::write(&path, doc.to_json()).unwrap();
    let sim = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
            .args(["plan"])
            .args(args)
            .args(["--topology", "star:hosts=8", "--engine", "flow", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let from_doc = sim(&["--plan", path.to_str().unwrap()]);
    let named = sim(&[
        "allreduce",
        "--algo",
        "ring",
        "--ranks",
        "8",
        "--size",
        "1MiB",
    ]);
    std::fs::remove_file(&path).unwrap();
    assert!(from_doc.contains("\"algo\": \"ring\"") && from_doc.contains("\"bytes\": 1048576"));
    assert_eq!(time_s(&from_doc), time_s(&named));
}
