//! Seeded random pods and server writes, for the randomized tests (tests/integration/chaos.rs and model.rs).

use std::ops::Range;

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, ResourceType};
use rand::Rng;
use rand::rngs::SmallRng;

use super::{labelled, pod};

/// One kind of random write to a random pod. Errors such as "already exists" or "not found" are
/// part of the game.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    /// Create the pod.
    Create,
    /// Change an annotation of the pod (with a selector label, also move it into or out of the
    /// selection).
    Modify,
    /// Delete the pod (with a finalizer it only starts terminating).
    Delete,
    /// Drop the pod's finalizers, so a terminating pod goes away.
    DropFinalizers,
    /// Delete the pod and create it again under the same name: a new uid.
    Recreate,
    /// Break the pod (it no longer decodes as a `Pod`: see [`is_broken`]) or mend it.
    BreakOrMend,
    /// Create (or, where that fails, delete) a few pods in one server step.
    Batch,
}

/// What random pods look like, and how often each write is drawn.
pub struct Writes {
    /// Each pod is in one of these.
    pub namespaces: &'static [&'static str],
    /// Pod names are `{prefix}0` .. `{prefix}{names - 1}`.
    pub prefix: &'static str,
    pub names: usize,
    /// The finalizer one pod in ten carries.
    pub finalizer: &'static str,
    /// A label every pod carries, "in" or "out" at random, for a watcher that selects `label=in`.
    pub selector: Option<&'static str>,
    /// Each kind of write with its weight, drawn as one number below the sum of the weights.
    pub mix: &'static [(u32, Write)],
    /// How many pods a [`Write::Batch`] writes.
    pub batch: Range<usize>,
}

impl Writes {
    pub fn pod(&self, rng: &mut SmallRng) -> Pod {
        let ns = self.namespaces[rng.random_range(0..self.namespaces.len())];
        let mut p = pod(ns, &format!("{}{}", self.prefix, rng.random_range(0..self.names)));
        if let Some(label) = self.selector {
            p = labelled(p, label, if rng.random_bool(0.5) { "in" } else { "out" });
        }
        if rng.random_bool(0.1) {
            p.metadata.finalizers = Some(vec![self.finalizer.into()]);
        }
        p
    }

    /// One random write.
    pub fn write(&self, server: &FakeApiServer, rng: &mut SmallRng) {
        let p = self.pod(rng);
        let (ns, name) = (p.metadata.namespace.clone().unwrap(), p.metadata.name.clone().unwrap());
        let mut draw = rng.random_range(0..self.mix.iter().map(|(weight, _)| weight).sum());
        let write = self.mix.iter().find_map(|&(weight, write)| {
            if draw < weight {
                return Some(write);
            }
            draw -= weight;
            None
        });
        match write.unwrap() {
            Write::Create => {
                let _ = server.create(&p);
            }
            Write::Modify => {
                if let Some(mut cur) = server.get::<Pod>(Some(&ns), &name) {
                    if let Some(label) = self.selector {
                        // Relabel across the selector, or into it.
                        let selected =
                            cur.metadata.labels.as_ref().and_then(|l| l.get(label)).is_some_and(|v| v == "in");
                        let flipped = if selected { "out" } else { "in" };
                        cur = labelled(cur, label, if rng.random_bool(0.6) { flipped } else { "in" });
                    }
                    cur.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert("n".into(), rng.random::<u32>().to_string());
                    let _ = server.replace(&cur);
                }
            }
            Write::Delete => {
                let _ = server.delete::<Pod>(Some(&ns), &name);
            }
            Write::DropFinalizers => drop_finalizers(server, &ns, &name),
            Write::Recreate => {
                drop_finalizers(server, &ns, &name);
                if server.delete::<Pod>(Some(&ns), &name).is_ok() {
                    let _ = server.create(&p);
                }
            }
            Write::BreakOrMend => {
                let rt = ResourceType::of::<Pod>();
                if let Some(mut v) = server.get_value(&rt, Some(&ns), &name) {
                    if is_broken(&v) {
                        v.as_object_mut().unwrap().remove("spec");
                    } else {
                        v["spec"] = serde_json::json!({"containers": 5});
                    }
                    let _ = server.replace_value(&rt, v);
                }
            }
            Write::Batch => server.batch(|b| {
                for _ in 0..rng.random_range(self.batch.clone()) {
                    let q = self.pod(rng);
                    let (ns, name) = (q.metadata.namespace.clone(), q.metadata.name.clone().unwrap());
                    if b.create(&q).is_err() {
                        let _ = b.delete::<Pod>(ns.as_deref(), &name);
                    }
                }
            }),
        }
    }
}

/// Whether [`Write::BreakOrMend`] left this pod broken.
pub fn is_broken(v: &serde_json::Value) -> bool {
    v["spec"]["containers"].is_number()
}

fn drop_finalizers(server: &FakeApiServer, ns: &str, name: &str) {
    if let Some(mut cur) = server.get::<Pod>(Some(ns), name) {
        cur.metadata.finalizers = None;
        let _ = server.replace(&cur);
    }
}
