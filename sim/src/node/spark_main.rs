//! What the driver's `spark-submit --deploy-mode client` (the image's entrypoint runs it) does
//! before the application starts, for an official image whose content the listing knows (see
//! `spark_image.rs`). In a driver pod (`spark.kubernetes.submitInDriver=true`) of Spark 3.4 and
//! later it first copies `spark.files`, `spark.jars`, `spark.archives` and `spark.submit.pyFiles`
//! into the working directory (`SparkSubmit.prepareSubmitEnvironment`,
//! `downloadResourcesToCurrentDirectory`, SPARK-33782: "Files X from Y to Z"), and a `local://`
//! one that is not there ends it with an uncaught `java.nio.file.NoSuchFileException`, exit 1, as
//! real Spark 4.3 and 3.5 do in the simulated cluster (`tests/real_spark.rs`). Then it puts the application jar and `spark.jars` on the classpath, skipping
//! `local://` jars the image does not have (`DependencyUtils.addJarToClasspath`: "Local jar
//! ... does not exist, skipping."), then loads the main class (`SparkSubmit.runMain`: "Error:
//! Failed to load class X." on stderr, exit 101, `SparkExitCode.CLASS_NOT_FOUND`); a Python application is run by
//! `PythonRunner` with `python3 <file>`, whose exit code spark-submit exits with (Python: "can't
//! open file ...", exit 2). These lines and codes are what spark-submit 3.5.8, 4.0.4, 4.1.2 and
//! 4.3.0 print in client mode (its shutdown-hook lines, printed by some versions only, are
//! left out). Only `local://` paths outside volume mounts are judged; a class
//! could come from any jar that is not judged (another scheme, a mounted volume,
//! `spark.driver.extraClassPath`, `spark.jars.packages`), and then it is not judged either.

use serde_json::Value;

use super::spark_conf::SparkConf;
use super::spark_image::{EXAMPLES_PACKAGE, SparkImage, is_example_class};

/// `SparkExitCode.CLASS_NOT_FOUND`.
pub(crate) const EXIT_CLASS_NOT_FOUND: i32 = 101;
/// Python's exit code when it cannot open the script.
pub(crate) const EXIT_PYTHON_CANNOT_OPEN: i32 = 2;

/// What spark-submit logged, and the exit code if it failed before the application ran.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    pub log: Vec<String>,
    pub exit: Option<i32>,
}

/// The driver's arguments after `driver`: the main class and the primary resource.
struct Args {
    class: Option<String>,
    primary: Option<String>,
}

/// A container's `args`, as strings.
pub(super) fn container_args(container: &Value) -> Vec<&str> {
    container
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Reads `driver [--option value]... <primary resource> [app args]` as `SparkSubmitArguments`.
fn parse_args(container: &Value) -> Args {
    let args = container_args(container);
    let mut out = Args {
        class: None,
        primary: None,
    };
    let mut i = usize::from(args.first() == Some(&"driver"));
    while let Some(a) = args.get(i) {
        if matches!(*a, "--verbose" | "-v" | "--supervise") {
            i += 1;
        } else if a.starts_with("--") {
            if *a == "--class" {
                out.class = args.get(i + 1).map(|s| s.to_string());
            }
            i += 2;
        } else {
            out.primary = Some(a.to_string());
            break;
        }
    }
    out
}

/// The path of a `local:` URI (`local:///a.jar`, `local:/a.jar`), None for any other scheme.
fn local_path(uri: &str) -> Option<&str> {
    let rest = uri.strip_prefix("local:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    // `local://host/path` has an authority: not a path in the image.
    path.starts_with('/').then_some(path)
}

/// Whether `path` is under one of the container's volume mounts (its content is not the image's).
fn under_mount(container: &Value, path: &str) -> bool {
    container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("mountPath").and_then(Value::as_str))
        .any(|mp| {
            let mp = mp.trim_end_matches('/');
            path.strip_prefix(mp)
                .is_some_and(|r| r.is_empty() || r.starts_with('/'))
        })
}

/// A local path the image decides: Some(exists), None when a volume is mounted over it.
fn in_image(image: &SparkImage, container: &Value, path: &str) -> Option<bool> {
    (!under_mount(container, path)).then(|| image.has_file(path))
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container
        .get("env")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

/// The exit code of a JVM whose main thread ended in an uncaught exception.
pub(crate) const EXIT_UNCAUGHT_EXCEPTION: i32 = 1;
/// The working directory of the image's driver (its `WorkingDir`), where the resources are copied.
const WORK_DIR: &str = "/opt/spark/work-dir";

/// `downloadResourcesToCurrentDirectory` in a driver pod: each `local://` file, jar, archive and
/// Python file is copied into the working directory, in that order; the first one the image does not
/// have ends spark-submit (the copy's exception). True when it ended.
fn copy_to_work_dir(image: &SparkImage, container: &Value, conf: &SparkConf, out: &mut Launch) -> bool {
    // Every line the listing has (3.5 and later) copies; Spark 3.4 was the first.
    if conf.get("spark.kubernetes.submitInDriver") != Some("true") {
        return false;
    }
    let keys = ["spark.files", "spark.jars", "spark.archives", "spark.submit.pyFiles"];
    let uris = keys
        .iter()
        .filter_map(|k| conf.get(k))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|u| !u.is_empty());
    for uri in uris {
        // Other schemes are downloaded first (not judged), `#name` renames the copy.
        let (bare, fragment) = uri.split_once('#').map_or((uri, None), |(u, f)| (u, Some(f)));
        let Some(path) = local_path(bare) else {
            continue;
        };
        let name = fragment.unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path));
        // Spark logs the URI as given, fragment and all.
        out.log.push(format!("Files {uri} from {path} to {WORK_DIR}/{name}"));
        if in_image(image, container, path) == Some(false) {
            out.log.push(format!(
                "Exception in thread \"main\" java.nio.file.NoSuchFileException: {path}"
            ));
            out.log
                .push("\tat org.apache.spark.deploy.SparkSubmit.prepareSubmitEnvironment(SparkSubmit.scala)".into());
            out.exit = Some(EXIT_UNCAUGHT_EXCEPTION);
            return true;
        }
    }
    false
}

/// Runs spark-submit's part for `container` of an official `image` with `conf`.
pub(crate) fn launch(image: &SparkImage, container: &Value, conf: &SparkConf) -> Launch {
    let args = parse_args(container);
    let mut out = Launch::default();
    let Some(primary) = args.primary else {
        return out;
    };
    if copy_to_work_dir(image, container, conf, &mut out) {
        return out;
    }
    // `SparkSubmit.isPython`; R applications are not judged.
    if primary.ends_with(".py") {
        if let Some(path) = local_path(&primary)
            && in_image(image, container, path) == Some(false)
        {
            // PythonRunner's interpreter, as it chooses it.
            let python = conf
                .get("spark.pyspark.driver.python")
                .or_else(|| conf.get("spark.pyspark.python"))
                .or_else(|| env(container, "PYSPARK_DRIVER_PYTHON"))
                .or_else(|| env(container, "PYSPARK_PYTHON"))
                .unwrap_or("python3");
            out.log.push(format!(
                "{python}: can't open file '{path}': [Errno 2] No such file or directory"
            ));
            out.exit = Some(EXIT_PYTHON_CANNOT_OPEN);
        }
        return out;
    }
    if primary.ends_with(".R") || primary.ends_with(".r") {
        return out;
    }
    let Some(class) = args.class else {
        return out;
    };
    // The classpath: the application jar (unless `spark-internal`), then `spark.jars`.
    let mut jars: Vec<&str> = Vec::new();
    if primary != "spark-internal" {
        jars.push(&primary);
    }
    jars.extend(
        conf.get("spark.jars")
            .into_iter()
            .flat_map(|j| j.split(','))
            .map(str::trim)
            .filter(|j| !j.is_empty()),
    );
    let mut judged = conf.get("spark.driver.extraClassPath").is_none_or(str::is_empty)
        && conf.get("spark.jars.packages").is_none_or(str::is_empty);
    let mut examples = false;
    for jar in jars {
        match local_path(jar).map(|p| (p, in_image(image, container, p))) {
            Some((path, Some(true))) => examples |= image.is_examples_jar(path),
            Some((path, Some(false))) => out.log.push(format!(
                "WARN DependencyUtils: Local jar {path} does not exist, skipping."
            )),
            // Another scheme (downloaded by the driver) or a mounted volume: any class may be in it.
            Some((_, None)) | None => judged = false,
        }
    }
    // Spark's own jars hold the other org.apache.spark classes (PythonRunner, the Thrift
    // server, ...), and only the examples jar's top-level package is listed.
    let package = class.rsplit_once('.').map_or("", |(p, _)| p);
    let spark_class = class.starts_with("org.apache.spark.") && package != EXAMPLES_PACKAGE;
    if !judged || spark_class {
        return out;
    }
    if !(examples && is_example_class(&class)) {
        out.log.push(format!("Error: Failed to load class {class}."));
        out.exit = Some(EXIT_CLASS_NOT_FOUND);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::spark_conf::parse_properties;
    use super::super::spark_image::official;
    use super::*;

    fn conf(pairs: &[(&str, &str)]) -> SparkConf {
        let text: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        SparkConf(parse_properties(&text))
    }

    fn driver(class: &str, primary: &str) -> Value {
        json!({
            "name": "spark-kubernetes-driver",
            "args": ["driver", "--properties-file", "/opt/spark/conf/spark.properties",
                     "--class", class, primary, "1000"],
            "volumeMounts": [{"name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf"},
                             {"name": "app", "mountPath": "/mnt/app"}]
        })
    }

    const PI: &str = "org.apache.spark.examples.SparkPi";
    const EXAMPLES: &str = "local:///opt/spark/examples/jars/spark-examples.jar";

    #[test]
    fn an_example_class_in_the_examples_jar_runs() {
        let img = official("apache/spark:4.0.4").unwrap();
        let c = conf(&[("spark.jars", EXAMPLES)]);
        assert_eq!(launch(&img, &driver(PI, EXAMPLES), &c), Launch::default());
        let versioned = "local:///opt/spark/examples/jars/spark-examples_2.13-4.0.4.jar";
        assert_eq!(launch(&img, &driver(PI, versioned), &conf(&[])), Launch::default());
    }

    #[test]
    fn a_missing_class_fails_with_spark_exit_code() {
        let img = official("apache/spark:4.0.4").unwrap();
        let c = conf(&[("spark.jars", EXAMPLES)]);
        let l = launch(&img, &driver("org.apache.spark.examples.SparkPI", EXAMPLES), &c);
        assert_eq!(l.exit, Some(101));
        assert_eq!(
            l.log[0],
            "Error: Failed to load class org.apache.spark.examples.SparkPI."
        );
        // A class of no jar on the classpath.
        assert_eq!(launch(&img, &driver("com.acme.Main", EXAMPLES), &c).exit, Some(101));
    }

    #[test]
    fn kubeflows_failing_application_fails_as_spark_does() {
        // test/e2e/bad_examples/fail-application.yaml: a class and a jar that do not exist.
        let img = official("spark:3.5.2").unwrap();
        let c = conf(&[("spark.jars", "local:///non-existent.jar")]);
        let l = launch(&img, &driver("non-existent", "local:///non-existent.jar"), &c);
        assert_eq!(l.exit, Some(101));
        assert_eq!(
            l.log,
            [
                "WARN DependencyUtils: Local jar /non-existent.jar does not exist, skipping.",
                "WARN DependencyUtils: Local jar /non-existent.jar does not exist, skipping.",
                "Error: Failed to load class non-existent.",
            ]
        );
    }

    #[test]
    fn in_a_driver_pod_a_missing_local_resource_ends_spark_submit_before_the_class_is_loaded() {
        // Kubeflow's failing application, as its driver pod runs it (Spark 3.4 and later copy the
        // resources into the working directory first).
        let img = official("apache/spark:4.0.4").unwrap();
        let c = conf(&[
            ("spark.kubernetes.submitInDriver", "true"),
            (
                "spark.files",
                "local:///opt/spark/examples/src/main/python/pi.py#renamed.py",
            ),
            ("spark.jars", "local:///non-existent.jar,local:///also-missing.jar"),
        ]);
        let l = launch(&img, &driver("non-existent", "local:///non-existent.jar"), &c);
        assert_eq!(l.exit, Some(1));
        assert_eq!(
            l.log[..3],
            [
                "Files local:///opt/spark/examples/src/main/python/pi.py#renamed.py from /opt/spark/examples/src/main/python/pi.py to /opt/spark/work-dir/renamed.py",
                "Files local:///non-existent.jar from /non-existent.jar to /opt/spark/work-dir/non-existent.jar",
                "Exception in thread \"main\" java.nio.file.NoSuchFileException: /non-existent.jar",
            ]
        );
        // Present: copied, then the class is looked for.
        let c = conf(&[("spark.kubernetes.submitInDriver", "true"), ("spark.jars", EXAMPLES)]);
        let l = launch(&img, &driver("org.apache.spark.examples.SparkPI", EXAMPLES), &c);
        assert_eq!(l.exit, Some(101), "{:?}", l.log);
        assert!(l.log[0].starts_with("Files local:///opt/spark/examples/jars/spark-examples.jar from "));
    }

    #[test]
    fn the_unversioned_examples_jar_is_missing_before_3_5_3() {
        let old = official("spark:3.5.2").unwrap();
        let l = launch(&old, &driver(PI, EXAMPLES), &conf(&[("spark.jars", EXAMPLES)]));
        assert_eq!(l.exit, Some(101), "{:?}", l.log);
        let new = official("spark:3.5.3").unwrap();
        assert_eq!(launch(&new, &driver(PI, EXAMPLES), &conf(&[])).exit, None);
    }

    #[test]
    fn jars_the_image_does_not_decide_leave_the_class_unjudged() {
        let img = official("apache/spark:4.0.4").unwrap();
        for (primary, extra) in [
            ("local:///mnt/app/app.jar", None),
            ("s3a://bucket/app.jar", None),
            ("https://example.com/app.jar", None),
            (
                "local:///non-existent.jar",
                Some(("spark.driver.extraClassPath", "/mnt/lib/*")),
            ),
            (
                "local:///non-existent.jar",
                Some(("spark.jars.packages", "com.acme:app:1.0")),
            ),
        ] {
            let c = conf(&extra.into_iter().collect::<Vec<_>>());
            assert_eq!(
                launch(&img, &driver("com.acme.Main", primary), &c).exit,
                None,
                "{primary}"
            );
        }
        // Spark's own classes and the examples' subpackages are not listed.
        let c = conf(&[]);
        for class in [
            "org.apache.spark.deploy.PythonRunner",
            "org.apache.spark.examples.ml.ALSExample",
        ] {
            assert_eq!(launch(&img, &driver(class, EXAMPLES), &c).exit, None, "{class}");
        }
    }

    #[test]
    fn a_missing_python_file_fails_as_python_does() {
        let img = official("apache/spark:4.0.4").unwrap();
        let runner = "org.apache.spark.deploy.PythonRunner";
        let ok = driver(runner, "local:///opt/spark/examples/src/main/python/pi.py");
        assert_eq!(launch(&img, &ok, &conf(&[])), Launch::default());
        let missing = driver(runner, "local:///opt/spark/examples/src/main/python/nope.py");
        let l = launch(&img, &missing, &conf(&[]));
        assert_eq!(l.exit, Some(2));
        assert_eq!(
            l.log[0],
            "python3: can't open file '/opt/spark/examples/src/main/python/nope.py': [Errno 2] No such file or directory"
        );
        let l = launch(&img, &missing, &conf(&[("spark.pyspark.python", "/usr/bin/python3")]));
        assert!(l.log[0].starts_with("/usr/bin/python3: can't open file"), "{:?}", l.log);
        // On a mounted volume: not judged.
        assert_eq!(
            launch(&img, &driver(runner, "local:///mnt/app/main.py"), &conf(&[])).exit,
            None
        );
    }
}
