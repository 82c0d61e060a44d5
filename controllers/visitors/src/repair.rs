//! Repair of lists that server-side apply cannot repair: a list merged by key (Service ports,
//! container ports, env, volumes, volume mounts, ...) keeps every item another client put there,
//! because the applier owns only the items it sent. When someone edits the key of one of our
//! items (a Service port 3306 → 3307), the apply adds our item back next to the edited one:
//! the child either keeps a foreign item or, when the two collide (two ports named `mysql`), the
//! API server rejects every apply.
//!
//! Pure: the desired and the live object (as JSON) in, a JSON patch out that removes the foreign
//! items and adds our missing ones, leaving every item of ours exactly as it is live (with the
//! server's defaults, allocated node ports and other managers' fields).

use serde_json::{Value, json};

/// Fields that identify an item of a keyed list, most specific first. Kubernetes merges
/// container and Service ports by port and protocol, volume mounts by mount path, volume
/// devices by device path, and containers, env, volumes and the like by name.
const PORT_KEYS: [&str; 2] = ["containerPort", "port"];
const PATH_KEYS: [&str; 2] = ["mountPath", "devicePath"];
const DEFAULT_PROTOCOL: &str = "TCP";

/// One list of the live object that holds items the controller did not put there.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftedList {
    /// JSON pointer into the live object, for example `/spec/ports`.
    pub path: String,
    /// What the list becomes: our items in our order, each as it is live when it is there.
    pub repaired: Value,
    /// The foreign items, described by their key fields only (an env item's value may be a
    /// secret someone pasted in: it never reaches a log, an Event or the status).
    pub foreign: Vec<String>,
}

/// Every list under `spec` of `desired` whose live counterpart holds foreign items. Lists the
/// controller does not set are not looked at: other clients may add to those.
pub fn drifted_lists(desired: &Value, live: &Value) -> Vec<DriftedList> {
    let mut drifted = Vec::new();
    walk(&desired["spec"], &live["spec"], "/spec".to_string(), &mut drifted);
    drifted
}

/// The JSON patch that repairs `drifted` on the live object of `resource_version`: the API
/// server refuses it when the object changed meanwhile, and the next reconcile looks again.
pub fn repair_patch(resource_version: &str, drifted: &[DriftedList]) -> Value {
    let mut operations = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})];
    operations.extend(drifted.iter().map(|list| json!({"op": "replace", "path": list.path, "value": list.repaired})));
    Value::Array(operations)
}

/// A short description of the foreign items of `drifted`, for example
/// `/spec/ports: port=3307 protocol=TCP name=mysql`.
pub fn describe(drifted: &[DriftedList]) -> String {
    drifted.iter().map(|list| format!("{}: {}", list.path, list.foreign.join(", "))).collect::<Vec<_>>().join("; ")
}

/// Whether `live` has to be deleted and created again to become `desired`: Kubernetes refuses
/// to change a Service's `clusterIP` in place ("may not change once set"). That is the case of
/// the MySQL client Service of an app reconciled before that Service became headless, or of a
/// Service someone re-created with an address of their own.
pub fn needs_recreating(desired: &Value, live: &Value) -> bool {
    let address = |service: &Value| service.pointer("/spec/clusterIP").and_then(Value::as_str).map(str::to_string);
    matches!((address(desired), address(live)), (Some(wanted), Some(present)) if wanted != present)
}

/// An item by its key fields, never its values.
fn identify(item: &Value) -> String {
    let fields = ["containerPort", "port", "protocol", "mountPath", "devicePath", "name"];
    let mut parts: Vec<String> =
        fields.iter().filter_map(|field| item.get(*field).map(|value| format!("{field}={}", plain(value)))).collect();
    if let Some(name) = item.get("metadata").and_then(|m| m.get("name")) {
        parts.push(format!("metadata.name={}", plain(name)));
    }
    if parts.is_empty() { "an item without a name".to_string() } else { parts.join(" ") }
}

fn plain(value: &Value) -> String {
    value.as_str().map(ToString::to_string).unwrap_or_else(|| value.to_string())
}

fn walk(desired: &Value, live: &Value, path: String, drifted: &mut Vec<DriftedList>) {
    match desired {
        Value::Object(fields) => {
            for (field, value) in fields {
                walk(value, &live[field.as_str()], format!("{path}/{}", escape(field)), drifted);
            }
        }
        Value::Array(wanted) => {
            let Some(present) = live.as_array() else { return };
            let ours = |item: &Value| wanted.iter().any(|w| same_item(item, w));
            let foreign: Vec<String> = present.iter().filter(|item| !ours(item)).map(identify).collect();
            if !foreign.is_empty() {
                let repaired = wanted
                    .iter()
                    .map(|w| present.iter().find(|item| same_item(item, w)).unwrap_or(w).clone())
                    .collect();
                drifted.push(DriftedList { path, repaired: Value::Array(repaired), foreign });
                return;
            }
            for item in wanted {
                if let Some(index) = present.iter().position(|p| same_item(p, item)) {
                    walk(item, &present[index], format!("{path}/{index}"), drifted);
                }
            }
        }
        _ => {}
    }
}

/// Whether `live` is the list item `desired` describes: same key fields for keyed items, the
/// same value for scalars, otherwise every field of `desired` present with the same value.
fn same_item(live: &Value, desired: &Value) -> bool {
    if let Some(key) = PORT_KEYS.iter().find(|k| desired.get(**k).is_some()) {
        let protocol = |v: &Value| v.get("protocol").and_then(Value::as_str).unwrap_or(DEFAULT_PROTOCOL).to_string();
        return live.get(*key) == desired.get(*key) && protocol(live) == protocol(desired);
    }
    if let Some(key) = PATH_KEYS.iter().find(|k| desired.get(**k).is_some()) {
        return live.get(*key) == desired.get(*key);
    }
    if let Some(name) = desired.get("name") {
        return live.get("name") == Some(name);
    }
    if let Some(name) = desired.get("metadata").and_then(|m| m.get("name")) {
        return live.get("metadata").and_then(|m| m.get("name")) == Some(name);
    }
    contains(live, desired)
}

fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(field, value)| live.get(field).is_some_and(|l| contains(l, value)))
        }
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(l, d)| contains(l, d))
        }
        (live, desired) => live == desired,
    }
}

/// JSON pointer escaping (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_is_recreated_only_when_its_address_has_to_change() {
        let headless = json!({"spec": {"clusterIP": "None"}});
        let allocated = json!({"spec": {"clusterIP": "10.96.12.34", "type": "ClusterIP"}});
        let unset = json!({"spec": {"type": "ClusterIP"}});
        assert!(needs_recreating(&headless, &allocated));
        assert!(!needs_recreating(&headless, &headless));
        assert!(!needs_recreating(&unset, &allocated), "an address the server allocated is no drift");
        assert!(!needs_recreating(&headless, &json!({})), "nothing live to compare");
    }

    fn service_ports(ports: Value) -> Value {
        json!({"metadata": {"name": "ex-mysql"}, "spec": {"ports": ports, "selector": {"app": "x"}}})
    }

    fn mysql_port(port: i64) -> Value {
        json!({"name": "mysql", "port": port, "targetPort": 3306})
    }

    #[test]
    fn an_edited_service_port_is_put_back_and_the_edited_one_removed() {
        let desired = service_ports(json!([mysql_port(3306)]));
        // As the API server holds it after `kubectl patch ... /spec/ports/0/port 3307`.
        let live = service_ports(json!([{"name": "mysql", "port": 3307, "protocol": "TCP", "targetPort": 3306}]));
        let drifted = drifted_lists(&desired, &live);
        assert_eq!(drifted.len(), 1, "{drifted:?}");
        assert_eq!(drifted[0].path, "/spec/ports");
        assert_eq!(drifted[0].repaired, json!([mysql_port(3306)]));
        assert_eq!(drifted[0].foreign, ["port=3307 protocol=TCP name=mysql"]);
        assert_eq!(describe(&drifted), "/spec/ports: port=3307 protocol=TCP name=mysql");
    }

    #[test]
    fn our_live_items_are_kept_as_they_are() {
        let desired = service_ports(json!([mysql_port(3306)]));
        let ours = json!({"name": "mysql", "port": 3306, "protocol": "TCP", "targetPort": 3306, "nodePort": 30306});
        let live = service_ports(json!([ours.clone(), {"name": "extra", "port": 9, "protocol": "UDP"}]));
        let drifted = drifted_lists(&desired, &live);
        assert_eq!(drifted[0].repaired, json!([ours]), "defaults and the allocated node port stay");
    }

    #[test]
    fn a_converged_object_with_server_defaults_has_no_drift() {
        let desired = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "mysql", "image": "mysql:8.4",
                "ports": [{"name": "mysql", "containerPort": 3306}],
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        let live = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "mysql", "image": "mysql:8.4", "imagePullPolicy": "IfNotPresent",
                "ports": [{"name": "mysql", "containerPort": 3306, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}],
            "dnsPolicy": "ClusterFirst"}},
            "volumeClaimTemplates": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"},
                "status": {"phase": "Pending"}}]}});
        assert_eq!(drifted_lists(&desired, &live), []);
    }

    #[test]
    fn nested_lists_are_repaired_where_they_drifted() {
        let desired = json!({"spec": {"template": {"spec": {"containers": [{"name": "ui",
            "env": [{"name": "TITLE", "value": "t"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}});
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar"},
            {"name": "ui", "env": [{"name": "TITLE", "value": "t"}, {"name": "TITLE2", "value": "t"}],
             "volumeMounts": [{"name": "data", "mountPath": "/elsewhere"}]}]}}}});
        let drifted = drifted_lists(&desired, &live);
        let paths: Vec<&str> = drifted.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/spec/template/spec/containers"], "a foreign container is drift of the outer list");

        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "ui", "env": [{"name": "TITLE", "value": "t"}, {"name": "TITLE2", "value": "t"}],
             "volumeMounts": [{"name": "data", "mountPath": "/elsewhere"}]}]}}}});
        let drifted = drifted_lists(&desired, &live);
        let paths: Vec<&str> = drifted.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/spec/template/spec/containers/0/env", "/spec/template/spec/containers/0/volumeMounts"],
            "{drifted:?}"
        );
        assert_eq!(drifted[1].repaired, json!([{"name": "data", "mountPath": "/data"}]));
    }

    #[test]
    fn descriptions_never_hold_values() {
        let desired = json!({"spec": {"env": [{"name": "A", "value": "1"}]}});
        let live = json!({"spec": {"env": [{"name": "A", "value": "1"}, {"name": "TOKEN", "value": "hunter2"}]}});
        let text = describe(&drifted_lists(&desired, &live));
        assert_eq!(text, "/spec/env: name=TOKEN");
    }

    #[test]
    fn lists_the_controller_does_not_set_are_left_alone() {
        let desired = json!({"metadata": {"finalizers": ["ours"]}, "spec": {"selector": {"app": "x"}}});
        let live =
            json!({"metadata": {"finalizers": ["theirs"]}, "spec": {"selector": {"app": "x"}, "ipFamilies": ["IPv4"]}});
        assert_eq!(drifted_lists(&desired, &live), []);
    }

    #[test]
    fn the_patch_is_conditional_on_the_resource_version() {
        let desired = service_ports(json!([mysql_port(3306)]));
        let live = service_ports(json!([mysql_port(3307)]));
        let patch = repair_patch("42", &drifted_lists(&desired, &live));
        assert_eq!(patch[0], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"}));
        assert_eq!(patch[1], json!({"op": "replace", "path": "/spec/ports", "value": [mysql_port(3306)]}));
        assert_eq!(escape("a/b~c"), "a~1b~0c");
    }
}
