//! A small in-memory API server behind kube's tower-test mock service, for reconcile scenarios
//! and the request-count benchmark.
//!
//! It keeps objects as JSON, answers the requests the controller makes (get, create,
//! server-side apply, merge patch, status apply, delete with preconditions, events) and
//! records each request with whether it changed anything. Server-side apply is modelled as "the applier owns what it sends":
//! `spec`, `data`, labels and owner references are replaced by the applied ones, and an apply
//! that changes nothing keeps the resourceVersion, as a real API server does.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_common::Runtime;
use controller_common::backoff::ObjectBackoff;
use controller_common::events::Events;
use controller_common::metrics::Metrics;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::client::{Body, ClientBuilder};
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use visitors_api::{MySQLRestore, VisitorsApp, VisitorsAppSpec};
use visitors_controller::context::{self, Context, Stores};
use visitors_controller::controller;
use visitors_controller::database::Target;
use visitors_controller::database::check::DatabaseCheck;
use visitors_controller::reconcile;
use visitors_controller::wake::cache::{CachedDeployment, CachedStatefulSet};
use visitors_controller::wake::seen::{Fingerprint, Seen};

pub const NAMESPACE: &str = "shop";
pub const RESYNC: Duration = Duration::from_secs(600);

/// One request the controller sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    /// The request created, changed or deleted something.
    pub changed: bool,
}

#[derive(Default)]
struct State {
    /// Keyed by collection path (`/apis/apps/v1/namespaces/shop/statefulsets`) and name.
    objects: BTreeMap<(String, String), Value>,
    requests: Vec<Recorded>,
    events: Vec<Value>,
    revision: u64,
    /// Requests whose path contains the text fail with that code and message.
    failures: Vec<(String, u16, String)>,
    /// What the controller last applied to each object: server-side apply removes what the
    /// applier stops sending, and keeps list items it never sent (they are someone else's).
    applied: BTreeMap<(String, String), Value>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// Collection paths of the kinds the controller touches.
pub fn collection<K: Resource<DynamicType = ()>>() -> String {
    let url = K::url_path(&(), Some(NAMESPACE));
    url.trim_end_matches('/').to_string()
}

impl FakeApi {
    /// A client whose requests this fake answers, on a background task.
    pub fn client(&self) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let response = fake.answer(request).await;
                send.send_response(response);
            }
        });
        // With the production request spans, so that traces can be checked too.
        ClientBuilder::new(service, NAMESPACE)
            .with_layer(&controller_common::telemetry::request_spans(&Default::default()))
            .build()
    }

    // ----- test controls -----

    pub fn put<K: Resource<DynamicType = ()> + Serialize>(&self, object: &K) {
        let mut value = serde_json::to_value(object).unwrap();
        let name = value["metadata"]["name"].as_str().unwrap().to_string();
        let mut state = self.state.lock().unwrap();
        state.revision += 1;
        value["metadata"]["resourceVersion"] = json!(state.revision.to_string());
        if value["metadata"]["uid"].is_null() {
            value["metadata"]["uid"] = json!(format!("uid-{name}-{}", state.revision));
        }
        state.objects.insert((collection::<K>(), name), value);
    }

    pub fn get<K: Resource<DynamicType = ()> + DeserializeOwned>(&self, name: &str) -> Option<K> {
        let state = self.state.lock().unwrap();
        state.objects.get(&(collection::<K>(), name.to_string())).map(|v| serde_json::from_value(v.clone()).unwrap())
    }

    pub fn remove<K: Resource<DynamicType = ()>>(&self, name: &str) {
        let mut state = self.state.lock().unwrap();
        let key = (collection::<K>(), name.to_string());
        state.objects.remove(&key);
        state.applied.remove(&key);
    }

    /// Changes a stored object the way another client would (new resourceVersion, and a new
    /// generation when the spec changed).
    pub fn edit<K>(&self, name: &str, change: impl FnOnce(&mut K))
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let mut object: K = self.get(name).expect("object to edit");
        let spec_before = serde_json::to_value(&object).unwrap()["spec"].clone();
        change(&mut object);
        if serde_json::to_value(&object).unwrap()["spec"] != spec_before {
            let generation = object.meta().generation.unwrap_or(1);
            object.meta_mut().generation = Some(generation + 1);
        }
        self.put(&object);
    }

    pub fn resource_version<K: Resource<DynamicType = ()> + DeserializeOwned>(&self, name: &str) -> Option<String> {
        self.get::<K>(name).and_then(|o| o.meta().resource_version.clone())
    }

    /// Every resourceVersion, to prove that nothing changed.
    pub fn versions(&self) -> BTreeMap<(String, String), String> {
        let state = self.state.lock().unwrap();
        state
            .objects
            .iter()
            .filter(|((path, _), _)| !path.ends_with("/events"))
            .map(|(key, v)| (key.clone(), v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()))
            .collect()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.state.lock().unwrap().requests.clear();
    }

    /// `(type, reason, note)` of every Event published.
    pub fn events(&self) -> Vec<(String, String, String)> {
        let state = self.state.lock().unwrap();
        state
            .events
            .iter()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (text("type"), text("reason"), text("note"))
            })
            .collect()
    }

    /// From now on, answers requests whose path contains `path_part` with an error `code`.
    /// Requests to paths containing `path_part` fail with `code`; a 403 reads like an RBAC
    /// denial from a real API server.
    pub fn fail_when(&self, path_part: &str, code: u16) {
        let message = if code == 403 {
            format!(
                "{path_part} is forbidden: User \"system:serviceaccount:ops:visitors-controller\" cannot patch resource"
            )
        } else {
            "injected by the test".to_string()
        };
        self.fail_with(path_part, code, &message);
    }

    /// Requests to paths containing `path_part` fail with `code` and `message`.
    pub fn fail_with(&self, path_part: &str, code: u16, message: &str) {
        self.state.lock().unwrap().failures.push((path_part.to_string(), code, message.to_string()));
    }

    pub fn stop_failing(&self) {
        self.state.lock().unwrap().failures.clear();
    }

    pub fn clear_events(&self) {
        self.state.lock().unwrap().events.clear();
    }

    // ----- the server -----

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
        let path = parts.uri.path().to_string();
        let content_type =
            parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let mut state = self.state.lock().unwrap();
        let (status, value, changed) = state.handle(&parts.method, &path, &content_type, body);
        state.requests.push(Recorded { method: parts.method.clone(), path, changed });
        let bytes = serde_json::to_vec(&value).unwrap();
        Response::builder().status(status).header("content-type", "application/json").body(Body::from(bytes)).unwrap()
    }
}

impl State {
    fn handle(&mut self, method: &Method, path: &str, content_type: &str, body: Value) -> (StatusCode, Value, bool) {
        if path.contains("/events.k8s.io/") {
            if *method == Method::POST || *method == Method::PATCH {
                self.events.push(body.clone());
            }
            return (StatusCode::CREATED, with_name(body, "event"), true);
        }
        if let Some((_, code, message)) = self.failures.iter().find(|(part, _, _)| path.contains(part.as_str())) {
            let code = StatusCode::from_u16(*code).unwrap();
            return status(code, code.canonical_reason().unwrap_or("Error"), message);
        }
        let (collection, name, subresource) = split(path, method);
        let key = (collection.clone(), name.clone());
        match *method {
            Method::GET => match self.objects.get(&key) {
                Some(object) => (StatusCode::OK, object.clone(), false),
                None => not_found(&name),
            },
            Method::POST => {
                let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let key = (collection, name.clone());
                if self.objects.contains_key(&key) {
                    return status(StatusCode::CONFLICT, "AlreadyExists", &format!("{name} already exists"));
                }
                let object = self.stamp_new(body);
                self.objects.insert(key, object.clone());
                (StatusCode::CREATED, object, true)
            }
            Method::PATCH if subresource.as_deref() == Some("status") => {
                let Some(existing) = self.objects.get(&key).cloned() else { return not_found(&name) };
                let mut updated = existing.clone();
                updated["status"] = body["status"].clone();
                self.store_if_changed(key, existing, updated)
            }
            Method::PATCH if content_type.starts_with("application/apply-patch") => {
                match self.objects.get(&key).cloned() {
                    None => {
                        if let Some(invalid) = invalid(&collection, &name, &body) {
                            return invalid;
                        }
                        self.applied.insert(key.clone(), body.clone());
                        let object = self.stamp_new(body);
                        self.objects.insert(key, object.clone());
                        (StatusCode::CREATED, object, true)
                    }
                    Some(existing) => {
                        let mut updated = existing.clone();
                        let previous = self.applied.get(&key).cloned().unwrap_or(Value::Null);
                        for field in ["spec", "data", "type"] {
                            if !body[field].is_null() {
                                updated[field] = apply_merge(&existing[field], &body[field], &previous[field]);
                            }
                        }
                        if let Some(invalid) =
                            invalid(&collection, &name, &updated).or_else(|| immutable(&name, &existing, &updated))
                        {
                            return invalid;
                        }
                        self.applied.insert(key.clone(), body.clone());
                        for field in ["labels", "ownerReferences", "annotations"] {
                            if !body["metadata"][field].is_null() {
                                updated["metadata"][field] = body["metadata"][field].clone();
                            }
                        }
                        self.store_if_changed(key, existing, updated)
                    }
                }
            }
            Method::PATCH if content_type.starts_with("application/json-patch") => {
                let Some(existing) = self.objects.get(&key).cloned() else { return not_found(&name) };
                let updated = match json_patch(&existing, &body) {
                    Ok(updated) => updated,
                    Err(why) => return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &why),
                };
                if let Some(invalid) = invalid(&collection, &name, &updated) {
                    return invalid;
                }
                self.store_if_changed(key, existing, updated)
            }
            Method::PATCH => {
                let Some(existing) = self.objects.get(&key).cloned() else { return not_found(&name) };
                let precondition = body["metadata"]["resourceVersion"].as_str();
                if precondition.is_some_and(|rv| Some(rv) != existing["metadata"]["resourceVersion"].as_str()) {
                    return status(StatusCode::CONFLICT, "Conflict", "the object has been modified");
                }
                let mut updated = existing.clone();
                merge(&mut updated, &body);
                updated["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
                let deleting = !updated["metadata"]["deletionTimestamp"].is_null();
                let no_finalizers = updated["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
                if deleting && no_finalizers {
                    self.objects.remove(&key);
                    return (StatusCode::OK, updated, true);
                }
                self.store_if_changed(key, existing, updated)
            }
            Method::DELETE => {
                let Some(existing) = self.objects.get(&key).cloned() else { return not_found(&name) };
                let preconditions = &body["preconditions"];
                for field in ["uid", "resourceVersion"] {
                    if let Some(wanted) = preconditions[field].as_str()
                        && Some(wanted) != existing["metadata"][field].as_str()
                    {
                        return status(StatusCode::CONFLICT, "Conflict", &format!("Precondition failed: {field}"));
                    }
                }
                self.objects.remove(&key);
                self.applied.remove(&key);
                (StatusCode::OK, existing, true)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "not supported by the fake"),
        }
    }

    fn stamp_new(&mut self, mut object: Value) -> Value {
        fill_in_defaults(&mut object);
        self.revision += 1;
        if object["kind"] == "Service" && object["spec"]["clusterIP"].is_null() {
            object["spec"]["clusterIP"] = json!(format!("10.96.0.{}", self.revision));
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        object["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        object["metadata"]["uid"] = json!(format!("uid-{name}-{}", self.revision));
        object["metadata"]["generation"] = json!(1);
        object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        object
    }

    fn store_if_changed(
        &mut self,
        key: (String, String),
        existing: Value,
        mut updated: Value,
    ) -> (StatusCode, Value, bool) {
        fill_in_defaults(&mut updated);
        if updated == existing {
            return (StatusCode::OK, existing, false);
        }
        self.revision += 1;
        updated["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        if updated["spec"] != existing["spec"] {
            let generation = existing["metadata"]["generation"].as_i64().unwrap_or(1);
            updated["metadata"]["generation"] = json!(generation + 1);
        }
        self.objects.insert(key, updated.clone());
        (StatusCode::OK, updated, true)
    }
}

/// What a real API server fills in that the controller does not send: in a StatefulSet's claim
/// templates, the volume mode and a status (`kubectl get sts -o yaml` shows both).
fn fill_in_defaults(object: &mut Value) {
    let Some(templates) = object.pointer_mut("/spec/volumeClaimTemplates").and_then(Value::as_array_mut) else {
        return;
    };
    for template in templates {
        if template["spec"].is_object() && template["spec"]["volumeMode"].is_null() {
            template["spec"]["volumeMode"] = json!("Filesystem");
        }
        template["status"] = json!({ "phase": "Pending" });
    }
}

/// `/apis/apps/v1/namespaces/shop/statefulsets/ex-mysql/status` → collection, name, subresource.
fn split(path: &str, method: &Method) -> (String, String, Option<String>) {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let at = parts.iter().position(|p| *p == "namespaces").expect("namespaced path");
    let collection_end = at + 3;
    let collection = parts[..collection_end.min(parts.len())].join("/");
    if *method == Method::POST && parts.len() == collection_end {
        return (collection, String::new(), None);
    }
    let name = parts.get(collection_end).map(|s| s.to_string()).unwrap_or_default();
    let subresource = parts.get(collection_end + 1).map(|s| s.to_string());
    (collection, name, subresource)
}

fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (key, value) in fields {
                if value.is_null() {
                    target.as_object_mut().unwrap().remove(key);
                } else {
                    merge(target.as_object_mut().unwrap().entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Server-side apply of `applied` onto `live`, as the API server does it for the fields the
/// applier owns: objects field by field, fields it sent before and not now removed; lists of
/// keyed items (ports by port and protocol, mounts by path, the rest by name) item by item,
/// keeping items it never sent; other lists replaced.
fn apply_merge(live: &Value, applied: &Value, previous: &Value) -> Value {
    match applied {
        Value::Object(fields) => {
            let mut merged = live.as_object().cloned().unwrap_or_default();
            if let Some(before) = previous.as_object() {
                for field in before.keys().filter(|f| !fields.contains_key(*f)) {
                    merged.remove(field);
                }
            }
            for (field, value) in fields {
                let live_field = live.get(field).unwrap_or(&Value::Null);
                merged.insert(field.clone(), apply_merge(live_field, value, &previous[field.as_str()]));
            }
            Value::Object(merged)
        }
        Value::Array(items) if items.first().and_then(merge_key).is_some() => {
            let keys = |list: &Value| -> Vec<String> {
                list.as_array().map(|l| l.iter().filter_map(merge_key).collect()).unwrap_or_default()
            };
            let sent_before = keys(previous);
            let mut merged = Vec::new();
            for item in live.as_array().into_iter().flatten() {
                let key = merge_key(item);
                match items.iter().find(|a| merge_key(a) == key) {
                    Some(ours) => {
                        let before = previous.as_array().into_iter().flatten().find(|p| merge_key(p) == key);
                        merged.push(apply_merge(item, ours, before.unwrap_or(&Value::Null)));
                    }
                    None if key.as_ref().is_some_and(|k| sent_before.contains(k)) => {}
                    None => merged.push(item.clone()),
                }
            }
            let live_keys = keys(live);
            merged.extend(items.iter().filter(|a| merge_key(a).is_none_or(|k| !live_keys.contains(&k))).cloned());
            Value::Array(merged)
        }
        other => other.clone(),
    }
}

fn merge_key(item: &Value) -> Option<String> {
    let protocol = item.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
    for port in ["containerPort", "port"] {
        if let Some(number) = item.get(port) {
            return Some(format!("{port}={number}/{protocol}"));
        }
    }
    ["mountPath", "devicePath", "name"].iter().find_map(|field| item.get(*field).map(|v| format!("{field}={v}")))
}

/// The API server's validation of what the controller's fixes are about: port names are
/// unique in a Service and in a container.
fn invalid(collection: &str, name: &str, object: &Value) -> Option<(StatusCode, Value, bool)> {
    let (kind, lists) = if collection.ends_with("/services") {
        ("Service", vec![("spec.ports".to_string(), &object["spec"]["ports"])])
    } else {
        let kind = if collection.ends_with("/statefulsets") { "StatefulSet" } else { "Deployment" };
        let containers = object["spec"]["template"]["spec"]["containers"].as_array();
        let lists = containers
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| (format!("spec.template.spec.containers[{i}].ports"), &c["ports"]))
            .collect();
        (kind, lists)
    };
    for (path, ports) in lists {
        let mut seen = Vec::new();
        for (index, port) in ports.as_array().into_iter().flatten().enumerate() {
            let Some(port_name) = port["name"].as_str() else { continue };
            if seen.contains(&port_name) {
                let message =
                    format!("{kind} \"{name}\" is invalid: {path}[{index}].name: Duplicate value: \"{port_name}\"");
                return Some(status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &message));
            }
            seen.push(port_name);
        }
    }
    None
}

/// The API server's refusal to change a Service's address in place.
fn immutable(name: &str, existing: &Value, updated: &Value) -> Option<(StatusCode, Value, bool)> {
    let address = |object: &Value| object["spec"]["clusterIP"].as_str().map(str::to_string);
    let (Some(before), after) = (address(existing), address(updated)) else { return None };
    (existing["kind"] == "Service" && Some(&before) != after.as_ref()).then(|| {
        let message = format!(
            "Service \"{name}\" is invalid: spec.clusterIPs[0]: Invalid value: []string{{\"{}\"}}: may not change once set",
            after.unwrap_or_default()
        );
        status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &message)
    })
}

/// RFC 6902, the operations the controller sends: test and replace.
fn json_patch(object: &Value, operations: &Value) -> Result<Value, String> {
    let mut patched = object.clone();
    for operation in operations.as_array().ok_or("a JSON patch is a list")? {
        let path = operation["path"].as_str().ok_or("an operation without a path")?;
        match operation["op"].as_str() {
            Some("test") if patched.pointer(path) == Some(&operation["value"]) => {}
            Some("test") => return Err(format!("the test of {path} failed")),
            Some("replace") => {
                *patched.pointer_mut(path).ok_or(format!("{path} does not exist"))? = operation["value"].clone()
            }
            _ => return Err("an operation the fake does not support".to_string()),
        }
    }
    Ok(patched)
}

fn with_name(mut value: Value, name: &str) -> Value {
    if value["metadata"]["name"].is_null() {
        value["metadata"]["name"] = json!(name);
    }
    value
}

fn not_found(name: &str) -> (StatusCode, Value, bool) {
    status(StatusCode::NOT_FOUND, "NotFound", &format!("{name} not found"))
}

fn status(code: StatusCode, reason: &str, message: &str) -> (StatusCode, Value, bool) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, body, false)
}

// ----- controller side -----

/// A database check that answers what the test says, and counts its calls.
#[derive(Default)]
pub struct FakeCheck {
    pub answer: Mutex<Option<String>>,
    pub calls: AtomicUsize,
    /// The CA the last check was asked to verify the server with.
    pub ca: Mutex<Option<Vec<u8>>>,
}

impl FakeCheck {
    pub fn fail_with(&self, why: &str) {
        *self.answer.lock().unwrap() = Some(why.to_string());
    }

    pub fn succeed(&self) {
        *self.answer.lock().unwrap() = None;
    }

    pub fn last_ca(&self) -> Option<Vec<u8>> {
        self.ca.lock().unwrap().clone()
    }
}

impl DatabaseCheck for FakeCheck {
    fn select_one<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(!target.password.is_empty(), "the check must use the Secret's password");
        *self.ca.lock().unwrap() = target.ca_pem.clone();
        let answer = self.answer.lock().unwrap().clone();
        Box::pin(async move { answer.map_or(Ok(()), Err) })
    }
}

/// The controller wired to a fake API, with caches the test fills as a watch would.
pub struct Harness {
    pub api: FakeApi,
    pub check: Arc<FakeCheck>,
    pub ctx: Arc<Context>,
    statefulsets: Mutex<Writer<CachedStatefulSet>>,
    deployments: Mutex<Writer<CachedDeployment>>,
    restores: Mutex<Writer<MySQLRestore>>,
    pods: Mutex<Writer<k8s_openapi::api::core::v1::Pod>>,
}

impl Harness {
    pub fn new() -> Self {
        let api = FakeApi::default();
        let client = api.client();
        let check = Arc::new(FakeCheck::default());
        let statefulsets = Writer::default();
        let deployments = Writer::default();
        let restores = Writer::default();
        let pods = Writer::default();
        let stores = Stores {
            statefulsets: statefulsets.as_reader(),
            deployments: deployments.as_reader(),
            restores: restores.as_reader(),
            pods: pods.as_reader(),
        };
        let runtime = Arc::new(Runtime {
            client: client.clone(),
            metrics: Arc::new(Metrics::new(controller::NAME)),
            backoff: ObjectBackoff::new(Duration::from_millis(500), Duration::from_secs(300)),
            events: Events::new(client, controller::NAME, None),
            field_manager: controller::NAME.to_string(),
            resync: RESYNC,
        });
        let check_handle = Some(check.clone() as Arc<dyn DatabaseCheck>);
        let ctx = Arc::new(Context {
            runtime,
            database_check: check_handle,
            agent: None,
            stores,
            seen: Seen::default(),
            hold: visitors_controller::wake::hold::Hold::default(),
            replication: Default::default(),
            metrics: Default::default(),
        });
        Self {
            api,
            check,
            ctx,
            statefulsets: Mutex::new(statefulsets),
            deployments: Mutex::new(deployments),
            restores: Mutex::new(restores),
            pods: Mutex::new(pods),
        }
    }

    /// Creates the app in the fake API, as `kubectl apply` would.
    pub fn create_app(&self, spec: VisitorsAppSpec) {
        let mut app = VisitorsApp::new("ex", spec);
        app.metadata.namespace = Some(NAMESPACE.to_string());
        app.metadata.generation = Some(1);
        self.api.put(&app);
    }

    pub fn app(&self) -> VisitorsApp {
        self.api.get("ex").expect("the app")
    }

    /// Changes the app's spec (new generation), as a user would.
    pub fn edit_spec(&self, change: impl FnOnce(&mut VisitorsAppSpec)) {
        // The fake API moves the generation, as a real one does on a spec change.
        self.api.edit::<VisitorsApp>("ex", |app| change(&mut app.spec));
    }

    /// One reconcile of the app as it is in the API, after the caches caught up.
    pub async fn reconcile(&self) -> Result<Action, context::Error> {
        self.sync_caches();
        let app = Arc::new(self.app());
        reconcile::reconcile(app, self.ctx.clone()).await
    }

    /// Fills the caches from the fake API, and tells the controller what changed, as the
    /// owned-object watches would.
    pub fn sync_caches(&self) {
        self.watch_children();
        // Trimmed as the controller's watches trim them.
        let statefulset = self.api.get::<StatefulSet>("ex-mysql").map(|sts| CachedStatefulSet::from(&sts));
        fill(&mut self.statefulsets.lock().unwrap(), statefulset);
        let deployments: Vec<CachedDeployment> = ["ex-backend", "ex-frontend"]
            .into_iter()
            .filter_map(|n| self.api.get::<Deployment>(n))
            .map(|deployment| CachedDeployment::from(&deployment))
            .collect();
        let mut writer = self.deployments.lock().unwrap();
        writer.apply_watcher_event(&watcher::Event::Init);
        for deployment in deployments {
            writer.apply_watcher_event(&watcher::Event::InitApply(deployment));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        fill(&mut self.restores.lock().unwrap(), self.api.get::<MySQLRestore>(RESTORE));
        fill(&mut self.pods.lock().unwrap(), None);
    }

    /// The StatefulSet controller reports the MySQL pod ready.
    /// What the watches report of each child: its state, or its deletion.
    fn watch_children(&self) {
        let seen = &self.ctx.seen;
        let statefulsets = ["ex-mysql"].map(|name| (name, self.api.get::<StatefulSet>(name)));
        let deployments = ["ex-backend", "ex-frontend"].map(|name| (name, self.api.get::<Deployment>(name)));
        let services = ["ex-mysql", "ex-mysql-headless", "ex-backend", "ex-frontend"]
            .map(|name| (name, self.api.get::<k8s_openapi::api::core::v1::Service>(name)));
        fn report<K: Fingerprint + Default>(seen: &Seen, name: &str, object: Option<K>) {
            match object {
                Some(object) => {
                    seen.is_news(&object);
                }
                None => {
                    let mut gone = K::default();
                    gone.meta_mut().name = Some(name.to_string());
                    gone.meta_mut().namespace = Some(NAMESPACE.to_string());
                    seen.forget(&gone);
                }
            }
        }
        statefulsets.into_iter().for_each(|(name, o)| report(seen, name, o));
        deployments.into_iter().for_each(|(name, o)| report(seen, name, o));
        services.into_iter().for_each(|(name, o)| report(seen, name, o));
    }

    pub fn mysql_pod_ready(&self) {
        self.api.edit::<StatefulSet>("ex-mysql", |sts| {
            sts.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
                observed_generation: sts.metadata.generation,
                replicas: 1,
                ready_replicas: Some(1),
                updated_replicas: Some(1),
                available_replicas: Some(1),
                ..Default::default()
            });
        });
    }

    /// The Deployment controller reports every replica of `name` ready.
    pub fn deployment_ready(&self, name: &str) {
        self.api.edit::<Deployment>(name, |d| {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            d.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                observed_generation: d.metadata.generation,
                replicas: Some(replicas),
                ready_replicas: Some(replicas),
                updated_replicas: Some(replicas),
                available_replicas: Some(replicas),
                ..Default::default()
            });
        });
    }

    /// Drives a fresh app to Ready: MySQL ready, the query answers, both Deployments ready.
    pub async fn converge(&self) {
        self.reconcile().await.unwrap();
        self.mysql_pod_ready();
        self.check.succeed();
        self.reconcile().await.unwrap();
        self.deployment_ready("ex-backend");
        self.deployment_ready("ex-frontend");
        let action = self.reconcile().await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC), "the app should be converged: {:?}", self.app().status);
    }
}

fn fill<K>(writer: &mut Writer<K>, object: Option<K>)
where
    K: Resource<DynamicType = ()> + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    if let Some(object) = object {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// The name of the one MySQLRestore the caches are filled with, when the fake API holds it.
pub const RESTORE: &str = "r1";

/// The book's resource.
pub fn book_spec() -> VisitorsAppSpec {
    VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..VisitorsAppSpec::default() }
}
