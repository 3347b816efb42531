//! Every intentional difference between our objects and what Spark's spark-submit sent (4.3, and 3.5
//! in `SPARK_3_5`), with the reason. `docs/submission.md` lists the same. An entry that no longer matches a difference in a
//! variant it names fails the test, so the list cannot go stale.

/// One allowed difference: in these variants (empty: all), in this object, at the fields matching
/// `path` (`*` matches anything).
pub struct Allowed {
    pub variants: &'static [&'static str],
    pub object: &'static str,
    pub path: &'static str,
    pub reason: &'static str,
}

const NAMED_LIKE_SPARK: &[&str] = &["minimal", "scala-pi-longname"];

/// The `path` of an entry that allows a whole object we build and spark-submit did not send.
pub const WHOLE_OBJECT: &str = "(the whole object)";

/// The variants whose spec has no executor template: spark-submit wrote none, the operator always
/// writes one.
const NO_EXECUTOR_TEMPLATE: &[&str] = &[
    "python-deps",
    "scala-pi",
    "scala-pi-driverenv",
    "python-pi",
    "minimal",
    "scala-pi-longname",
    "scala-pi-rich",
    "scala-pi-no-netpol",
    "scala-pi-wait",
    "scala-pi-pod-exists",
    "scala-pi-netpol-forbidden",
];

/// Why the operator writes an executor pod template where spark-submit wrote none.
const EXECUTOR_TEMPLATE: &str = "the operator writes the executor pod template at every submission, with the \
                                 application's executor settings applied (decoration), so Spark builds complete \
                                 executors even when the webhook is off or fails open (docs/executor-template.md); \
                                 oracle.rs checks the template, the conf keys and the mount agree with each other";

/// An allowed difference that comes from the executor pod template the operator always writes.
const fn executor_template(object: &'static str, path: &'static str) -> Allowed {
    Allowed {
        variants: NO_EXECUTOR_TEMPLATE,
        object,
        path,
        reason: EXECUTOR_TEMPLATE,
    }
}

/// Why the minimal variant's unset sizes appear in `spark.properties`.
const DEFAULTED: &str = "submit applies Kubeflow's defaults first (the webhook may not have run) and passes them as \
                         Kubeflow passes them to spark-submit: 1 core and 1g, as Spark's own defaults, and 1 executor \
                         where Spark alone starts 2; the minimal capture set none";

/// An allowed difference at `path` in the minimal variant's `spark.properties`, set by the defaults.
const fn defaulted(path: &'static str) -> Allowed {
    Allowed {
        variants: &["minimal"],
        object: "configmap",
        path,
        reason: DEFAULTED,
    }
}

pub const ALLOWED: &[Allowed] = &[
    Allowed {
        variants: &[],
        object: "pod",
        path: "metadata.namespace",
        reason: "our objects carry their namespace (spark-submit leaves it to the request URL); same object",
    },
    Allowed {
        variants: &[],
        object: "service",
        path: "metadata.namespace",
        reason: "our objects carry their namespace (spark-submit leaves it to the request URL); same object",
    },
    Allowed {
        variants: &["scala-pi-templates"],
        object: "configmap-executor-pod-template",
        path: "metadata.namespace",
        reason: "our objects carry their namespace (spark-submit leaves it to the request URL); same object",
    },
    Allowed {
        variants: &[],
        object: "pod",
        path: "metadata.ownerReferences*",
        reason: "the driver pod is owned by its SparkApplication, its only controller (Kubeflow's webhook adds the \
                 same reference); oracle.rs checks the reference itself",
    },
    Allowed {
        variants: &[],
        object: "pod",
        path: "metadata.finalizers*",
        reason: "the driver-protection finalizer keeps the pod until its end is recorded in status; oracle.rs checks \
                 it is exactly that finalizer",
    },
    Allowed {
        variants: &["minimal"],
        object: "*",
        path: "*sparkoperator.k8s.io/*",
        reason: "Kubeflow always labels driver and executors with app-name, submission-id and launched-by; \
                 the minimal capture passed no labels",
    },
    Allowed {
        variants: &["scala-pi-longname"],
        object: "*",
        path: "*sparkoperator.k8s.io/app-name]",
        reason: "the app-name label is always the SparkApplication's name; the capture kept spark-pi while \
                 renaming the app",
    },
    defaulted("data[spark.properties][spark.driver.cores]"),
    defaulted("data[spark.properties][spark.driver.memory]"),
    defaulted("data[spark.properties][spark.executor.cores]"),
    defaulted("data[spark.properties][spark.executor.memory]"),
    defaulted("data[spark.properties][spark.executor.instances]"),
    Allowed {
        variants: NAMED_LIKE_SPARK,
        object: "pod",
        path: "metadata.name",
        reason: "the driver pod is always <app>-driver (Kubeflow), so a rerun or a restarted controller finds \
                 it; Spark names it <prefix>-driver when no name is given",
    },
    Allowed {
        variants: NAMED_LIKE_SPARK,
        object: "*",
        path: "metadata.ownerReferences[0].name",
        reason: "owned by the driver pod, whose name differs (see metadata.name)",
    },
    Allowed {
        variants: NAMED_LIKE_SPARK,
        object: "configmap",
        path: "data[spark.properties][spark.kubernetes.driver.pod.name]",
        reason: "the driver pod's name (see metadata.name)",
    },
    Allowed {
        variants: NAMED_LIKE_SPARK,
        object: "configmap",
        path: "data[spark.properties][spark.app.name]",
        reason: "Spark's app name is the SparkApplication's name (Kubeflow's --name); the captures used the \
                 main class and a name that cannot be an object name",
    },
    Allowed {
        variants: &["scala-pi-longname"],
        object: "networkpolicy",
        path: "metadata.name",
        reason: "<prefix>-policy, and the prefix starts with the app name (63 characters at most here)",
    },
    Allowed {
        variants: &["scala-pi-templates"],
        object: "configmap",
        path: "data[spark.properties][spark.kubernetes.driver.podTemplateFile]",
        reason: "the driver template is applied when the pod is built; its file path on the submitting \
                 machine means nothing to the driver",
    },
    Allowed {
        variants: &[],
        object: "configmap",
        path: "data[spark.properties][spark.kubernetes.executor.podTemplateContainerName]",
        reason: "Kubeflow names the executor container so Spark finds it even behind a sidecar (a template \
                 is always written, see below)",
    },
    executor_template("configmap-executor-pod-template", WHOLE_OBJECT),
    executor_template(
        "configmap",
        "data[spark.properties][spark.kubernetes.executor.podTemplateFile]",
    ),
    executor_template("pod", "spec.volumes[pod-template-volume]*"),
    executor_template("pod", "spec.containers[*].volumeMounts[/opt/spark/pod-template]*"),
    Allowed {
        variants: &["scala-pi-rich"],
        object: "configmap",
        path: "data[spark.properties][spark.kubernetes.driver.scheduler.name]",
        reason: "driver.schedulerName is a pod setting applied by decoration, as by Kubeflow's webhook; the \
                 pod's schedulerName is the same",
    },
];

/// Differences allowed with Spark 3.5 only, in addition to [`ALLOWED`] (which applies to every
/// release); each entry would say why 3.5 differs there and 4.3 does not. None: the two differences
/// the 3.5.3 captures showed (the `spark-version` label, `subPathExpr` on mounts) were fixed by version
/// in `SparkFeatures` instead.
pub const SPARK_3_5: &[Allowed] = &[];

/// `*` matches any run of characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|&i| tail.is_char_boundary(i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

impl Allowed {
    pub fn applies_to(&self, variant: &str) -> bool {
        self.variants.is_empty() || self.variants.contains(&variant)
    }

    pub fn matches(&self, variant: &str, object: &str, path: &str) -> bool {
        self.applies_to(variant) && glob(self.object, object) && glob(self.path, path)
    }
}

#[test]
fn globs_match_like_shell_patterns() {
    assert!(glob("metadata.ownerReferences*", "metadata.ownerReferences[0].uid"));
    assert!(glob(
        "*sparkoperator.k8s.io/*",
        "spec.selector[sparkoperator.k8s.io/app-name]"
    ));
    assert!(!glob("metadata.name", "metadata.namespace"));
    assert!(glob("*", ""));
}
