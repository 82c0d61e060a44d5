//! Free memory between live allocations goes back to the system. Its own test binary: the
//! resident size must not move with other tests' allocations.

fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("a size in kB")
}

#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn freed_memory_between_live_allocations_is_handed_back() {
    // 64 MiB in small blocks, then all freed but every 64th: the survivors hold every page of
    // the heap in place, so malloc cannot give any back by itself.
    let mut blocks: Vec<Box<[u8; 1024]>> = (0..65_536).map(|_| Box::new([1u8; 1024])).collect();
    let kept: Vec<Box<[u8; 1024]>> = blocks.drain(..).step_by(64).collect();
    let before = resident_kib();

    assert!(controller_common::heap::trim(), "some memory was handed back");

    let after = resident_kib();
    assert!(after + 32 * 1024 < before, "resident {before} KiB before, {after} KiB after");
    assert_eq!(kept.len(), 1_024);
}
