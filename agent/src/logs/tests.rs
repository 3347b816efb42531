//! The store's tests: a kubelet stand-in writes, rotates and deletes CRI log files; the store (or one
//! follower, where the order of events must be exact) copies them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use spark_operator_api::labels::SparkRole;

use super::follow::Follower;
use super::store::Limits;
use super::*;
use crate::identity::SparkContainer;

/// A CRI record as containerd writes it.
fn record(i: usize) -> String {
    format!("2026-01-01T00:00:00.{i:09}Z stdout F line {i}\n")
}

fn records(range: std::ops::Range<usize>) -> String {
    range.map(record).collect()
}

/// kubelet and the runtime, for one container's log file.
struct Kubelet {
    path: PathBuf,
    rotations: usize,
}

impl Kubelet {
    fn new(dir: &Path, pod: &str) -> Self {
        let path = dir.join(format!("ns_{pod}_uid")).join("spark").join("0.log");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "").unwrap();
        Self { path, rotations: 0 }
    }

    fn write(&self, text: &str) {
        let mut file = OpenOptions::new().append(true).create(true).open(&self.path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    /// `0.log` → `0.log.<timestamp>`, and the runtime reopens a new `0.log`.
    fn rotate(&mut self) {
        self.rotations += 1;
        let rotated = self
            .path
            .with_file_name(format!("0.log.20260101-0000{:02}", self.rotations));
        std::fs::rename(&self.path, rotated).unwrap();
        std::fs::write(&self.path, "").unwrap();
    }

    /// Container GC: the pod's whole log directory goes.
    fn remove_pod_logs(&self) {
        std::fs::remove_dir_all(self.path.parent().unwrap().parent().unwrap()).unwrap();
    }
}

fn container(
    app: &str,
    submission: &str,
    pod: &str,
    role: SparkRole,
    executor: Option<i64>,
    id: &str,
) -> SparkContainer {
    SparkContainer {
        namespace: "ns".into(),
        app_name: app.into(),
        submission_id: submission.into(),
        spark_app_id: Some("spark-1".into()),
        pod_name: pod.into(),
        pod_uid: "uid".into(),
        role,
        executor_id: executor,
        container_name: "spark".into(),
        container_id: id.into(),
        attempt: 0,
    }
}

fn limits() -> Limits {
    Limits {
        max_bytes: 0,
        max_app_bytes: 0,
        max_age: Duration::ZERO,
        poll: Duration::from_millis(5),
    }
}

/// Waits for `done`; the deadline only bounds how long a failure takes to show.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

fn copy(store: &LogStore, app: &str, id: &str) -> String {
    let (path, _) = store.copy_of("ns", app, id).expect("the container is in the store");
    std::fs::read_to_string(path).unwrap()
}

fn finished(store: &LogStore, app: &str, id: &str) -> bool {
    store
        .index("ns", app)
        .into_iter()
        .flat_map(|i| i.executions)
        .flat_map(|e| e.containers)
        .any(|c| c.id == id && c.finished_at.is_some() && !c.running)
}

/// Polls until the follower is idle; `switched` if any poll switched files.
fn poll_all(follower: &mut Follower) -> (String, super::follow::Progress) {
    let mut out = Vec::new();
    let mut switched = false;
    loop {
        let mut progress = follower
            .poll(u64::MAX, &mut |bytes| {
                out.extend_from_slice(bytes);
                Ok(())
            })
            .unwrap();
        switched |= progress.switched;
        if progress.idle {
            progress.switched = switched;
            return (String::from_utf8(out).unwrap(), progress);
        }
    }
}

#[test]
fn a_follower_reads_across_rotations_even_two_between_polls() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = Kubelet::new(dir.path(), "p");
    kubelet.write(&records(0..10));
    let mut follower = Follower::start(&kubelet.path, 4096);
    let (first, progress) = poll_all(&mut follower);
    assert_eq!(first, records(0..10));
    assert!(progress.idle && !progress.gone);

    // Lines land in the old file after the poll, then two rotations with lines in between.
    kubelet.write(&records(10..20));
    kubelet.rotate();
    kubelet.write(&records(20..30));
    kubelet.rotate();
    kubelet.write(&records(30..40));
    let (second, progress) = poll_all(&mut follower);
    assert_eq!(second, records(10..40), "nothing lost, nothing doubled");
    assert!(progress.switched);

    // One poll stops at a switch, so a checkpoint names the next file before any of it is copied.
    kubelet.write(&records(40..45));
    kubelet.rotate();
    kubelet.write(&records(45..50));
    let mut out = Vec::new();
    let progress = follower
        .poll(u64::MAX, &mut |bytes| {
            out.extend_from_slice(bytes);
            Ok(())
        })
        .unwrap();
    assert!(progress.switched && !progress.idle);
    assert_eq!(String::from_utf8(out).unwrap(), records(40..45));
    let checkpoint = follower.checkpoint(0).unwrap();
    let new_file = std::fs::metadata(&kubelet.path).unwrap();
    assert_eq!(
        (checkpoint.file.ino, checkpoint.offset),
        (std::os::unix::fs::MetadataExt::ino(&new_file), 0)
    );
    assert_eq!(poll_all(&mut follower).0, records(45..50));

    // Nothing new: nothing handed out again.
    let (third, progress) = poll_all(&mut follower);
    assert_eq!(third, "");
    assert!(progress.idle);
}

#[test]
fn a_file_queued_from_the_path_and_rotated_before_it_is_read_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = Kubelet::new(dir.path(), "p");
    kubelet.write(&records(0..10));
    let mut follower = Follower::start(&kubelet.path, 4096);
    assert_eq!(poll_all(&mut follower).0, records(0..10));
    // Two rotations while it waits: one poll drains the old file and queues the rotated one and the
    // one at the path.
    kubelet.rotate();
    kubelet.write(&records(10..20));
    kubelet.rotate();
    kubelet.write(&records(20..30));
    let progress = follower.poll(u64::MAX, &mut |_| Ok(())).unwrap();
    assert!(progress.switched && !progress.idle);
    // The file queued from the path is rotated before the follower gets to it, so the next switch
    // lists it under its rotated name.
    kubelet.rotate();
    kubelet.write(&records(30..40));
    assert_eq!(
        poll_all(&mut follower).0,
        records(10..40),
        "nothing lost, nothing doubled"
    );
}

#[test]
fn a_follower_started_late_reads_the_rotated_files_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = Kubelet::new(dir.path(), "p");
    kubelet.write(&records(0..5));
    kubelet.rotate();
    kubelet.write(&records(5..10));
    kubelet.rotate();
    kubelet.write(&records(10..15));
    // A compressed rotated file is not read (its text was read before kubelet compressed it).
    std::fs::write(kubelet.path.with_file_name("0.log.20250101-000000.gz"), "binary").unwrap();
    let mut follower = Follower::start(&kubelet.path, 4096);
    // kubelet deletes the oldest rotated file: it was opened, so it is still read.
    std::fs::remove_file(kubelet.path.with_file_name("0.log.20260101-000001")).unwrap();
    assert_eq!(poll_all(&mut follower).0, records(0..15));
}

#[test]
fn a_deleted_file_is_drained_through_the_open_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::new(dir.path(), "p");
    kubelet.write(&records(0..3));
    let mut follower = Follower::start(&kubelet.path, 16);
    assert_eq!(poll_all(&mut follower).0, records(0..3));
    // Written, then the pod's logs removed before the follower looked again.
    kubelet.write(&records(3..50));
    kubelet.remove_pod_logs();
    let (rest, progress) = poll_all(&mut follower);
    assert_eq!(rest, records(3..50));
    assert!(progress.gone);
    assert!(follower.directory_gone());
}

#[test]
fn only_whole_records_are_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = Kubelet::new(dir.path(), "p");
    kubelet.write("2026-01-01T00:00:00Z stdout F one\n2026-01-01T00:00:01Z stdout F tw");
    let mut follower = Follower::start(&kubelet.path, 4096);
    assert_eq!(poll_all(&mut follower).0, "2026-01-01T00:00:00Z stdout F one\n");
    kubelet.write("o\n");
    assert_eq!(poll_all(&mut follower).0, "2026-01-01T00:00:01Z stdout F two\n");
    // A file rotated away with a torn last record: the record still ends before the next file's.
    kubelet.write("2026-01-01T00:00:02Z stdout F cut");
    kubelet.rotate();
    kubelet.write(&record(7));
    let (out, _) = poll_all(&mut follower);
    assert_eq!(out, format!("2026-01-01T00:00:02Z stdout F cut\n{}", record(7)));
}

#[test]
fn the_store_copies_a_container_through_rotation_and_exit() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    let mut kubelet = Kubelet::new(&pods, "pi-driver");
    let store = LogStore::open_with(&dir.path().join("store"), "node-1", limits()).unwrap();
    kubelet.write(&records(0..100));
    store.container_started(LogSource {
        container: container("pi", "s1", "pi-driver", SparkRole::Driver, None, "c1"),
        log_path: kubelet.path.clone(),
        started_at: 1,
    });
    wait_for("the first lines", || {
        copy(&store, "pi", "c1").len() == records(0..100).len()
    });
    for round in 1..5 {
        kubelet.write(&records(round * 100..round * 100 + 100));
        kubelet.rotate();
    }
    kubelet.write(&records(500..510));
    store.container_exited("c1", 99);
    wait_for("the copy to finish", || finished(&store, "pi", "c1"));
    assert_eq!(copy(&store, "pi", "c1"), records(0..510));
    // The pod and kubelet's files go; the copy stays, where the layout says.
    kubelet.remove_pod_logs();
    let expected = dir.path().join("store/ns/pi/s1/pi-driver/spark/0.log");
    assert_eq!(std::fs::read_to_string(expected).unwrap(), records(0..510));
    let index = store.index("ns", "pi").unwrap();
    assert_eq!(index.node, "node-1");
    assert_eq!(index.executions.len(), 1);
    let entry = &index.executions[0].containers[0];
    assert_eq!(
        (entry.role.as_str(), entry.finished_at, entry.running),
        ("driver", Some(99), false)
    );
    assert_eq!(entry.bytes, records(0..510).len() as u64);
    assert_eq!(store.metrics().bytes.get(), records(0..510).len() as i64);
    // Reported again (a relist): nothing happens twice.
    store.container_started(LogSource {
        container: container("pi", "s1", "pi-driver", SparkRole::Driver, None, "c1"),
        log_path: kubelet.path.clone(),
        started_at: 1,
    });
    assert_eq!(copy(&store, "pi", "c1"), records(0..510));
    store.close();
}

#[test]
fn a_container_whose_logs_vanish_unreported_is_finished_once_drained() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::new(&dir.path().join("pods"), "p");
    let store = LogStore::open_with(&dir.path().join("store"), "n", limits()).unwrap();
    store.container_started(LogSource {
        container: container("a", "s", "p", SparkRole::Executor, Some(1), "c"),
        log_path: kubelet.path.clone(),
        started_at: 0,
    });
    kubelet.write(&records(0..20));
    kubelet.remove_pod_logs();
    wait_for("the copy to finish", || finished(&store, "a", "c"));
    assert_eq!(copy(&store, "a", "c"), records(0..20));
    store.close();
}

#[test]
fn served_logs_join_partial_records_like_kubectl_logs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(
        &path,
        "2026-01-01T00:00:00Z stdout P a long \n\
         2026-01-01T00:00:01Z stderr F an error\n\
         2026-01-01T00:00:02Z stdout P line in \n\
         2026-01-01T00:00:03Z stdout F three parts\n\
         not a record\n\
         2026-01-01T00:00:04Z stdout P cut short",
    )
    .unwrap();
    let text = String::from_utf8(read::render_all(&path, false).unwrap()).unwrap();
    assert_eq!(text, "an error\na long line in three parts\n");
    // With the last record complete it is shown as well, mid-line ends flushed.
    std::fs::write(&path, "2026-01-01T00:00:00Z stdout P never ended\n").unwrap();
    let text = String::from_utf8(read::render_all(&path, true).unwrap()).unwrap();
    assert_eq!(text, "2026-01-01T00:00:00Z never ended\n");
}

#[test]
fn a_restarted_store_resumes_where_it_stopped_and_rebuilds_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let pods = dir.path().join("pods");
    let mut running = Kubelet::new(&pods, "driver");
    let gone = Kubelet::new(&pods, "exec-1");
    let store = LogStore::open_with(&root, "n", limits()).unwrap();
    running.write(&records(0..10));
    gone.write(&records(0..5));
    store.container_started(LogSource {
        container: container("pi", "s1", "driver", SparkRole::Driver, None, "d"),
        log_path: running.path.clone(),
        started_at: 10,
    });
    store.container_started(LogSource {
        container: container("pi", "s1", "exec-1", SparkRole::Executor, Some(1), "e"),
        log_path: gone.path.clone(),
        started_at: 11,
    });
    wait_for("both copies", || {
        copy(&store, "pi", "d") == records(0..10) && copy(&store, "pi", "e") == records(0..5)
    });
    store.close();
    // While the agent is down: the driver writes and its log rotates; the executor's pod goes.
    running.write(&records(10..20));
    running.rotate();
    running.write(&records(20..30));
    gone.write(&records(5..8));
    gone.remove_pod_logs();

    let store = LogStore::open_with(&root, "n", limits()).unwrap();
    let index = store
        .index("ns", "pi")
        .expect("the index is rebuilt from the directory");
    let containers = &index.executions[0].containers;
    assert_eq!(containers.len(), 2);
    let executor = containers.iter().find(|c| c.id == "e").unwrap();
    assert_eq!((executor.role.as_str(), executor.executor_id), ("executor", Some(1)));
    assert!(executor.finished_at.is_some(), "its source is gone: marked finished");
    assert_eq!(copy(&store, "pi", "e"), records(0..5));
    wait_for("the driver's copy to catch up", || {
        copy(&store, "pi", "d") == records(0..30)
    });
    running.write(&records(30..35));
    store.container_exited("d", 50);
    wait_for("the driver to finish", || finished(&store, "pi", "d"));
    assert_eq!(copy(&store, "pi", "d"), records(0..35), "nothing lost, nothing doubled");
    store.close();
}

#[test]
fn restarts_around_a_lost_file_mark_the_gap_once_and_copy_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let mut kubelet = Kubelet::new(&dir.path().join("pods"), "driver");
    let source = || LogSource {
        container: container("pi", "s1", "driver", SparkRole::Driver, None, "d"),
        log_path: kubelet.path.clone(),
        started_at: 0,
    };
    kubelet.write(&records(0..10));
    let store = LogStore::open_with(&root, "n", limits()).unwrap();
    store.container_started(source());
    wait_for("the first lines", || copy(&store, "pi", "d") == records(0..10));
    store.close();
    // While the agent is down: the file it read is rotated and deleted (kubelet keeps only a few).
    kubelet.write(&records(10..20));
    let rotated = kubelet.path.with_file_name("0.log.20260101-000001");
    kubelet.rotate();
    kubelet.write(&records(20..30));
    std::fs::remove_file(rotated).unwrap();

    let store = LogStore::open_with(&root, "n", limits()).unwrap();
    wait_for("what is left", || copy(&store, "pi", "d").ends_with(&records(20..30)));
    assert_eq!(store.metrics().gaps.get(), 1);
    // The agent crashes now (no checkpoint on the way out): its directory as it is, opened again.
    let crashed = dir.path().join("crashed");
    copy_tree(&root, &crashed);
    store.close();
    kubelet.write(&records(30..35));
    let store = LogStore::open_with(&crashed, "n", limits()).unwrap();
    wait_for("the new lines", || copy(&store, "pi", "d").ends_with(&records(30..35)));
    let text = copy(&store, "pi", "d");
    assert!(text.starts_with(&records(0..10)), "{text}");
    assert!(text.ends_with(&records(20..35)), "{text}");
    assert_eq!(text.matches("lines may be missing").count(), 1, "{text}");
    assert_eq!(text.matches("line 20\n").count(), 1, "{text}");
    assert_eq!(store.metrics().gaps.get(), 0, "the second restart resumed exactly");
    store.close();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One finished container of `app` holding `lines` records.
fn finished_app(store: &LogStore, pods: &Path, app: &str, id: &str, lines: usize, finished_at: i64) {
    let kubelet = Kubelet::new(pods, &format!("{app}-driver"));
    kubelet.write(&records(0..lines));
    store.container_started(LogSource {
        container: container(app, "s", &format!("{app}-driver"), SparkRole::Driver, None, id),
        log_path: kubelet.path.clone(),
        started_at: 0,
    });
    store.container_exited(id, finished_at);
    wait_for("a finished copy", || finished(store, app, id));
}

#[test]
fn over_the_total_the_oldest_finished_application_goes_never_a_running_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let pods = dir.path().join("pods");
    let one = records(0..10).len() as u64;
    let store = LogStore::open_with(
        &root,
        "n",
        Limits {
            max_bytes: one * 3,
            ..limits()
        },
    )
    .unwrap();
    // A running application started first; then two that finish, the later-started one first.
    let running = Kubelet::new(&pods, "live-driver");
    running.write(&records(0..10));
    store.container_started(LogSource {
        container: container("live", "s", "live-driver", SparkRole::Driver, None, "live"),
        log_path: running.path.clone(),
        started_at: 0,
    });
    // Counted, not only on disk: the bound below is over the counted bytes.
    wait_for("the running copy", || {
        store
            .index("ns", "live")
            .is_some_and(|i| i.executions[0].containers[0].bytes == one)
    });
    finished_app(&store, &pods, "old", "old", 10, 100);
    finished_app(&store, &pods, "new", "new", 10, 200);
    assert!(store.index("ns", "old").is_some());

    // One more application: over the bound, the one that finished first goes.
    finished_app(&store, &pods, "third", "third", 10, 300);
    assert!(
        store.index("ns", "old").is_none(),
        "the oldest finished application was evicted"
    );
    assert!(!root.join("ns/old").exists());
    assert!(store.index("ns", "new").is_some());
    assert!(store.index("ns", "live").is_some());
    assert_eq!(store.metrics().evicted_for_size.get(), 1);

    // The running application grows: finished ones go, oldest first, then it is cut, never evicted.
    running.write(&records(10..40));
    wait_for("the running copy to be cut", || {
        store
            .index("ns", "live")
            .is_some_and(|i| i.executions[0].containers[0].truncated)
    });
    assert!(store.index("ns", "new").is_none() && store.index("ns", "third").is_none());
    let text = copy(&store, "live", "live");
    assert!(text.starts_with(&records(0..10)));
    assert!(text.contains("--log-store-max-bytes was reached"), "{text}");
    assert_eq!(store.metrics().truncated.get(), 1);
    store.close();
}

#[test]
fn over_its_own_bound_an_application_drops_its_oldest_finished_containers_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    let one = records(0..10).len() as u64;
    let store = LogStore::open_with(
        &dir.path().join("store"),
        "n",
        Limits {
            max_app_bytes: one * 2 + one / 2,
            ..limits()
        },
    )
    .unwrap();
    let source = |pod: &str, id: &str, exec: i64| {
        let kubelet = Kubelet::new(&pods, pod);
        kubelet.write(&records(0..10));
        store.container_started(LogSource {
            container: container("app", "s", pod, SparkRole::Executor, Some(exec), id),
            log_path: kubelet.path.clone(),
            started_at: exec,
        });
        wait_for("a copy", || copy(&store, "app", id).len() as u64 == one);
        kubelet
    };
    let _first = source("exec-1", "e1", 1);
    store.container_exited("e1", 10);
    let _second = source("exec-2", "e2", 2);
    store.container_exited("e2", 20);
    wait_for("both finished", || {
        finished(&store, "app", "e1") && finished(&store, "app", "e2")
    });
    // A third container: over the application's bound, its oldest finished container goes.
    let third = source("exec-3", "e3", 3);
    // The copy's bytes are on disk before the store counts them, so the drop may trail the copy a little.
    let ids = || -> Vec<String> {
        store.index("ns", "app").map_or_else(Vec::new, |i| {
            i.executions[0].containers.iter().map(|c| c.id.clone()).collect()
        })
    };
    wait_for("e1 to be dropped", || ids() == ["e2", "e3"]);
    assert_eq!(ids(), ["e2", "e3"]);
    assert_eq!(store.metrics().dropped_containers.get(), 1);
    // Growing further: e2 goes, then e3 (running) is cut with a line saying why.
    third.write(&records(10..30));
    wait_for("the running container to be cut", || {
        store
            .index("ns", "app")
            .is_some_and(|i| i.executions[0].containers.iter().all(|c| c.truncated))
    });
    let text = copy(&store, "app", "e3");
    assert!(text.contains("--log-store-max-app-bytes was reached"), "{text}");
    assert!(store.copy_of("ns", "app", "e2").is_none());
    store.close();
}

#[test]
fn finished_applications_older_than_the_max_age_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    let store = LogStore::open_with(
        &dir.path().join("store"),
        "n",
        Limits {
            max_age: Duration::from_secs(3600),
            ..limits()
        },
    )
    .unwrap();
    let now = jiff::Timestamp::now().as_nanosecond() as i64;
    finished_app(&store, &pods, "ancient", "a", 3, now - 7200 * 1_000_000_000);
    finished_app(&store, &pods, "recent", "r", 3, now);
    let running = Kubelet::new(&pods, "live-driver");
    store.container_started(LogSource {
        container: container("live", "s", "live-driver", SparkRole::Driver, None, "l"),
        log_path: running.path.clone(),
        started_at: 0,
    });
    store.sweep();
    assert!(store.index("ns", "ancient").is_none());
    assert!(store.index("ns", "recent").is_some());
    assert!(store.index("ns", "live").is_some());
    assert_eq!(store.metrics().evicted_for_age.get(), 1);
    store.close();
}

#[test]
fn names_that_would_leave_the_store_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::new(&dir.path().join("pods"), "p");
    let store = LogStore::open_with(&dir.path().join("store"), "n", limits()).unwrap();
    let mut bad = container("..", "s", "p", SparkRole::Driver, None, "x");
    store.container_started(LogSource {
        container: bad.clone(),
        log_path: kubelet.path.clone(),
        started_at: 0,
    });
    bad.app_name = "a/b".into();
    store.container_started(LogSource {
        container: bad,
        log_path: kubelet.path.clone(),
        started_at: 0,
    });
    assert!(store.copy_of("ns", "..", "x").is_none() && store.copy_of("ns", "a/b", "x").is_none());
    assert_eq!(std::fs::read_dir(dir.path().join("store")).unwrap().count(), 0);
    store.close();
}

#[test]
fn sizes_and_durations_parse_or_are_explained() {
    assert_eq!(parse_bytes("10Gi"), Ok(10 << 30));
    assert_eq!(parse_bytes("500M"), Ok(500_000_000));
    assert_eq!(parse_bytes("0"), Ok(0));
    assert!(parse_bytes("10GB").unwrap_err().contains("10Gi"));
    assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert!(parse_duration("7 days").unwrap_err().contains("7d"));
    let defaults = LogArgs::default();
    assert_eq!(defaults.log_address.port(), DEFAULT_PORT);
}

mod choosing {
    use super::super::client::{AgentPod, Nothing, Selection, choose};
    use super::super::index::{AppIndex, ContainerEntry, Execution};

    fn entry(id: &str, role: &str, executor: Option<i64>, started_at: i64) -> ContainerEntry {
        ContainerEntry {
            id: id.into(),
            role: role.into(),
            executor_id: executor,
            pod: format!("pod-{id}"),
            container: "spark".into(),
            attempt: 0,
            spark_app_id: None,
            started_at,
            finished_at: None,
            running: false,
            bytes: 1,
            truncated: false,
        }
    }

    fn held() -> Vec<(AgentPod, AppIndex)> {
        let agent = |name: &str| AgentPod {
            name: name.into(),
            node: format!("node-{name}"),
        };
        let index = |executions| AppIndex {
            node: "n".into(),
            namespace: "ns".into(),
            app_name: "pi".into(),
            executions,
        };
        vec![
            (
                agent("a"),
                index(vec![
                    Execution {
                        submission_id: "first".into(),
                        first_seen: 10,
                        containers: vec![entry("d1", "driver", None, 10)],
                    },
                    Execution {
                        submission_id: "second".into(),
                        first_seen: 30,
                        containers: vec![entry("d2", "driver", None, 30)],
                    },
                ]),
            ),
            (
                agent("b"),
                index(vec![Execution {
                    submission_id: "second".into(),
                    first_seen: 20,
                    containers: vec![
                        entry("e2-1", "executor", Some(1), 31),
                        entry("e2-2", "executor", Some(2), 32),
                    ],
                }]),
            ),
        ]
    }

    #[test]
    fn the_current_execution_or_the_nth_oldest_and_the_driver_or_an_executor() {
        let held = held();
        let current = Selection {
            current_submission: Some("second".into()),
            ..Selection::default()
        };
        let chosen = choose(&held, &current).unwrap();
        assert_eq!((chosen.agent, chosen.container.id.as_str()), (0, "d2"));
        let executor = choose(
            &held,
            &Selection {
                executor: Some(2),
                ..current.clone()
            },
        )
        .unwrap();
        assert_eq!((executor.agent, executor.container.id.as_str()), (1, "e2-2"));
        // --attempt 1: the oldest execution by first sight on any node.
        let first = choose(
            &held,
            &Selection {
                attempt: Some(1),
                ..current.clone()
            },
        )
        .unwrap();
        assert_eq!(first.container.id, "d1");
        // No current submission known: the newest.
        assert_eq!(choose(&held, &Selection::default()).unwrap().container.id, "d2");
    }

    #[test]
    fn nothing_to_show_says_why() {
        let held = held();
        assert_eq!(choose(&[], &Selection::default()), Err(Nothing::NotHeld));
        let missing = choose(
            &held,
            &Selection {
                executor: Some(9),
                current_submission: Some("second".into()),
                ..Selection::default()
            },
        )
        .unwrap_err();
        assert!(missing.to_string().contains("executors held: 1, 2"), "{missing}");
        let attempt = choose(
            &held,
            &Selection {
                attempt: Some(3),
                ..Selection::default()
            },
        )
        .unwrap_err();
        assert_eq!(attempt, Nothing::NoSuchAttempt { asked: 3, count: 2 });
        let current = choose(
            &held,
            &Selection {
                current_submission: Some("third".into()),
                ..Selection::default()
            },
        )
        .unwrap_err();
        assert!(current.to_string().contains("first, second"), "{current}");
    }
}
