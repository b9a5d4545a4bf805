use super::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use serde_json::{Value, json};

/// A minimal protobuf writer, so the tests can build bodies field by field.
#[derive(Default)]
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) -> &mut Self {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return self;
            }
            self.0.push(byte | 0x80);
        }
    }
    fn int(&mut self, field: u64, v: i64) -> &mut Self {
        self.varint(field << 3).varint(v as u64)
    }
    fn bytes(&mut self, field: u64, b: &[u8]) -> &mut Self {
        self.varint(field << 3 | 2).varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, field: u64, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }
    fn entry(&mut self, field: u64, k: &str, v: &str) -> &mut Self {
        let e = Writer::default().str(1, k).str(2, v).done();
        self.bytes(field, &e)
    }
    fn done(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = Writer::default().str(1, api_version).str(2, kind).done();
    let mut body = MAGIC.to_vec();
    body.extend(Writer::default().bytes(1, &type_meta).bytes(2, raw).str(3, "").str(4, "").done());
    body
}

fn as_json(body: &[u8]) -> Value {
    object::<Value>(body).unwrap()
}

#[test]
fn a_config_map_as_kubectl_sends_it() {
    // Go writes empty strings, a zero generation and a zero creation time; JSON leaves them out.
    let meta =
        Writer::default().str(1, "cm-1").str(2, "").str(3, "").int(7, 0).bytes(8, &[]).entry(11, "app", "web").done();
    let raw = Writer::default().bytes(1, &meta).entry(2, "k", "v").entry(3, "bin", "\u{1}").done();
    let body = envelope("v1", "ConfigMap", &raw);
    let expected = json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm-1", "labels": {"app": "web"}},
           "data": {"k": "v"}, "binaryData": {"bin": "AQ=="}});
    assert_eq!(as_json(&body), expected);
    let typed: ConfigMap = object(&body).unwrap();
    assert_eq!(typed, serde_json::from_value(expected).unwrap());
}

#[test]
fn pointers_keep_their_zero_and_inlined_fields_join_their_parent() {
    let container = Writer::default().str(1, "c").str(2, "nginx").int(16, 0).done();
    let volume = {
        let empty_dir = Writer::default().done();
        let source = Writer::default().bytes(2, &empty_dir).done();
        Writer::default().str(1, "scratch").bytes(2, &source).done()
    };
    let pod_spec = Writer::default().bytes(1, &volume).bytes(2, &container).done();
    let template = Writer::default().bytes(2, &pod_spec).done();
    let strategy = {
        let percent = Writer::default().int(1, 1).str(3, "25%").done();
        let rolling = Writer::default().bytes(1, &percent).done();
        Writer::default().str(1, "RollingUpdate").bytes(2, &rolling).done()
    };
    let spec = Writer::default().int(1, 0).bytes(3, &template).bytes(4, &strategy).done();
    let meta = Writer::default().str(1, "web").done();
    let status = Writer::default().int(2, 0).done();
    let raw = Writer::default().bytes(1, &meta).bytes(2, &spec).bytes(3, &status).done();
    let obj = as_json(&envelope("apps/v1", "Deployment", &raw));
    assert_eq!(obj["spec"]["replicas"], json!(0));
    assert_eq!(obj["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}}));
    let pod = &obj["spec"]["template"]["spec"];
    assert_eq!(pod["containers"], json!([{"name": "c", "image": "nginx"}]));
    assert_eq!(pod["volumes"], json!([{"name": "scratch", "emptyDir": {}}]));
    assert_eq!(obj["status"], json!({}), "a status's zero replicas is left out");
}

#[test]
fn times_quantities_and_int_or_strings_read_as_their_json_forms() {
    let ts = Writer::default().int(1, 1_700_000_000).done();
    let meta = Writer::default().str(1, "p").bytes(8, &ts).done();
    let quantity = Writer::default().str(1, "250m").done();
    let entry = Writer::default().str(1, "cpu").bytes(2, &quantity).done();
    let resources = Writer::default().bytes(2, &entry).done();
    let port = Writer::default().int(1, 0).int(2, 8080).done();
    let tcp = Writer::default().bytes(1, &port).done();
    let probe_handler = Writer::default().bytes(3, &tcp).done();
    let probe = Writer::default().bytes(1, &probe_handler).int(2, 0).int(3, 5).done();
    let container = Writer::default().str(1, "c").bytes(8, &resources).bytes(10, &probe).done();
    let spec = Writer::default().bytes(2, &container).done();
    let raw = Writer::default().bytes(1, &meta).bytes(2, &spec).done();
    let body = envelope("v1", "Pod", &raw);
    let obj = as_json(&body);
    assert_eq!(obj["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
    let c = &obj["spec"]["containers"][0];
    assert_eq!(c["resources"], json!({"requests": {"cpu": "250m"}}));
    assert_eq!(c["livenessProbe"], json!({"tcpSocket": {"port": 8080}, "timeoutSeconds": 5}));
    let pod: Pod = object(&body).unwrap();
    assert_eq!(pod, serde_json::from_value(obj).unwrap());
}

#[test]
fn secret_bytes_become_the_base64_that_byte_string_reads() {
    let data = Writer::default().str(1, "key").bytes(2, &[0, 159, 255]).done();
    let raw = Writer::default().bytes(2, &data).str(3, "Opaque").done();
    let secret: Secret = object(&envelope("v1", "Secret", &raw)).unwrap();
    assert_eq!(secret.data.unwrap()["key"].0, vec![0, 159, 255]);
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
}

#[test]
fn repeated_numbers_read_packed_and_unpacked() {
    // ContainerRestartRuleOnExitCodes.values: `repeated int32`, Go writes it unpacked, proto3
    // writers packed; both, interleaved with another field, are one list.
    let packed = Writer::default().varint(1).varint(2).done();
    let rule = Writer::default().int(2, 7).str(1, "In").bytes(2, &packed).int(2, -1).done();
    let values = read_message("core.v1.ContainerRestartRuleOnExitCodes", &rule).unwrap();
    assert_eq!(values, json!({"values": [7, 1, 2, -1], "operator": "In"}));
}

fn read_message(name: &str, bytes: &[u8]) -> Result<Value, Error> {
    let schema = schema::schema();
    de::message(schema, schema.message(name).unwrap(), bytes, &[], None)
}

#[test]
fn unknown_field_numbers_are_skipped() {
    let meta = Writer::default().str(1, "x").str(99, "?").done();
    let raw = Writer::default().bytes(1, &meta).int(77, 1).done();
    let body = envelope("v1", "ConfigMap", &raw);
    let cm: ConfigMap = object(&body).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("x"));
}

#[test]
fn what_it_cannot_read_is_an_error_that_names_it() {
    let meta = Writer::default().str(1, "x").done();
    let raw = Writer::default().bytes(1, &meta).done();
    let err = object::<Value>(&envelope("example.com/v1", "Widget", &raw)).unwrap_err();
    assert!(err.0.contains("\"Widget\""), "{err}");
    assert!(object::<Value>(b"{\"kind\":\"ConfigMap\"}").unwrap_err().0.contains("magic"));
    let mut truncated = envelope("v1", "ConfigMap", &raw);
    truncated.truncate(truncated.len() - 3);
    assert!(object::<ConfigMap>(&truncated).is_err());
    // The wrong kind for the type: k8s-openapi's own check, as with JSON.
    let err = object::<Pod>(&envelope("v1", "ConfigMap", &raw)).unwrap_err();
    assert!(err.0.contains("ConfigMap"), "{err}");
    // A string field sent as a number names the field.
    let bad = Writer::default().int(1, 5).done();
    let err = object::<ConfigMap>(&envelope("v1", "ConfigMap", &Writer::default().bytes(1, &bad).done())).unwrap_err();
    assert!(err.0.contains("meta.v1.ObjectMeta.name"), "{err}");
    // A length far past the end is refused before anything is allocated for it.
    let mut huge = MAGIC.to_vec();
    huge.extend(Writer::default().varint(2 << 3 | 2).varint(u64::MAX >> 1).done());
    assert!(object::<ConfigMap>(&huge).unwrap_err().0.contains("runs past the end"));
}

#[test]
fn an_error_status_reads_as_kubernetes_writes_it() {
    // apiVersion v1, kind Status: a meta.k8s.io type served under every group version.
    let cause = Writer::default().str(1, "FieldValueInvalid").str(2, "bad").str(3, "spec.x").done();
    let details =
        Writer::default().str(1, "web").str(2, "apps").str(3, "deployments").bytes(4, &cause).int(5, 0).done();
    let list_meta = Writer::default().str(1, "").str(2, "").done();
    let raw = Writer::default()
        .bytes(1, &list_meta)
        .str(2, "Failure")
        .str(3, "too old resource version: 5 (9)")
        .str(4, "Expired")
        .bytes(5, &details)
        .int(6, 410)
        .done();
    let status: k8s_openapi::apimachinery::pkg::apis::meta::v1::Status =
        object(&envelope("v1", "Status", &raw)).unwrap();
    let expected = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 5 (9)", "reason": "Expired", "code": 410,
        "details": {"name": "web", "group": "apps", "kind": "deployments",
                    "causes": [{"reason": "FieldValueInvalid", "message": "bad", "field": "spec.x"}]}});
    assert_eq!(status, serde_json::from_value(expected).unwrap());
}

#[test]
fn runs_of_repeated_fields_read_in_place_whether_or_not_the_type_wants_them() {
    // labels (11) and finalizers (14) in one run each, between other fields; a type that does not
    // know them skips them and still reads what follows.
    let meta = Writer::default()
        .str(1, "x")
        .entry(11, "a", "1")
        .entry(11, "b", "2")
        .str(14, "f1")
        .str(14, "f2")
        .str(3, "ns")
        .done();
    let raw = Writer::default().bytes(1, &meta).entry(2, "k", "v").done();
    let body = envelope("v1", "ConfigMap", &raw);
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Meta {
        name: String,
        namespace: String,
    }
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Narrow {
        metadata: Meta,
        data: std::collections::BTreeMap<String, String>,
    }
    let narrow: Narrow = object(&body).unwrap();
    assert_eq!(narrow.metadata, Meta { name: "x".into(), namespace: "ns".into() });
    assert_eq!(narrow.data.len(), 1);
    let cm: ConfigMap = object(&body).unwrap();
    assert_eq!(cm.metadata.finalizers, Some(vec!["f1".into(), "f2".into()]));
    assert_eq!(cm.metadata.labels.unwrap().len(), 2);
    assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
    // The same records split into two runs each are still one list and one map.
    let split =
        Writer::default().entry(11, "a", "1").str(14, "f1").str(1, "x").entry(11, "b", "2").str(14, "f2").done();
    let cm: ConfigMap = object(&envelope("v1", "ConfigMap", &Writer::default().bytes(1, &split).done())).unwrap();
    assert_eq!(cm.metadata.finalizers, Some(vec!["f1".into(), "f2".into()]));
    assert_eq!(cm.metadata.labels.unwrap().len(), 2);
    assert_eq!(cm.metadata.name.as_deref(), Some("x"));
}

/// Only a repeated field's first run is counted at first; a second run makes the decoder read the
/// object again counting every run (`Ctx::split_runs`), which never shows: the object reads as
/// if its runs were one, and an object that is also malformed gets the error of what is wrong
/// with it, not the retry's.
#[test]
fn a_field_in_two_runs_deep_in_an_object_reads_as_one_and_the_retry_never_shows() {
    let env = |name: &str| Writer::default().str(1, name).str(2, "v").done();
    // workingDir (5) after the second run: what it holds decides whether the object is valid.
    let container = |late: bool, dir: &[u8]| {
        let mut c = Writer::default();
        c.str(1, "c").bytes(7, &env("A"));
        if !late {
            c.bytes(7, &env("B"));
        }
        c.str(2, "nginx");
        if late {
            c.bytes(7, &env("B"));
        }
        c.bytes(5, dir).done()
    };
    let pod = |late: bool, dir: &[u8]| {
        let spec = Writer::default().bytes(2, &container(false, b"/")).bytes(2, &container(late, dir)).done();
        envelope("v1", "Pod", &Writer::default().bytes(2, &spec).done())
    };
    let (one, two): (Pod, Pod) = (object(&pod(false, b"/")).unwrap(), object(&pod(true, b"/")).unwrap());
    assert_eq!(one, two);
    let env = two.spec.unwrap().containers[1].env.clone().unwrap();
    assert_eq!((env.len(), env.capacity()), (2, 2));
    let err = object::<Pod>(&pod(true, b"\xff")).unwrap_err();
    assert!(!err.is_split(), "{err}");
    assert!(err.0.contains("workingDir: a string that is not UTF-8"), "{err}");
}

#[test]
fn lists_get_their_exact_capacity() {
    // Records counted before the list is built (serde's size_hint): no growth, no slack, also
    // when a list's records are split into runs or its numbers come packed.
    let env = |name: &str| Writer::default().str(1, name).str(2, "v").done();
    let mut container = Writer::default();
    container.str(1, "c");
    for i in 0..5 {
        container.bytes(7, &env(&format!("E{i}")));
    }
    let container = container.str(2, "nginx").bytes(7, &env("LATE")).done();
    let spec = Writer::default().bytes(2, &container).done();
    let raw = Writer::default().bytes(2, &spec).done();
    let pod: Pod = object(&envelope("v1", "Pod", &raw)).unwrap();
    let containers = pod.spec.unwrap().containers;
    assert_eq!((containers.len(), containers.capacity()), (1, 1));
    let env = containers[0].env.as_ref().unwrap();
    assert_eq!((env.len(), env.capacity()), (6, 6));
    assert_eq!(env[5].name, "LATE");
    let packed = Writer::default().varint(1).varint(300).varint(2).done();
    let rule = Writer::default().int(2, 7).str(1, "In").bytes(2, &packed).done();
    let schema = schema::schema();
    let index = schema.message("core.v1.ContainerRestartRuleOnExitCodes").unwrap();
    let rule: k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes =
        de::message(schema, index, &rule, &[], None).unwrap();
    let values = rule.values.unwrap();
    assert_eq!((values.as_slice(), values.capacity()), (&[7, 1, 300, 2][..], 4));
}

#[test]
fn embedded_json_reads_as_serde_json_reads_it() {
    // fieldsV1 is checked as UTF-8 as a whole and parsed with serde_json's `from_str`
    // (src/codec/protobuf/de/value.rs): the same value as serde_json's `from_slice`, or an error
    // where it errs.
    let texts: &[&[u8]] = &[
        br#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"k:{\"name\":\"app\"}":{".":{}}}"#,
        b" { \"a\" : [ 1 , -2 , 3.5 , 1e5 , -0 , true , false , null , \"x\" , [ ] , { } ] } \n",
        r#"{"s":"\u00e9\ud83d\ude00\n\t\"\\\/","\u0041":"é😀","":""}"#.as_bytes(),
        b"\"top\"",
        b"{",
        b"{\"a\":1,}",
        b"{\"a\":1} x",
        b"\"\\ud800\"",
        b"\"a\x01b\"",
        b"\"\xff\"",
        b"{\"\xc3\":1}",
        b"[\"\xe2\x82\"]",
    ];
    for text in texts {
        let entry = Writer::default().bytes(7, &Writer::default().bytes(1, text).done()).done();
        let ours = read_message("meta.v1.ManagedFieldsEntry", &entry).map(|v| v["fieldsV1"].clone());
        match (ours, serde_json::from_slice::<Value>(text)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(text)),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{}: ours {a:?}, serde_json's {b:?}", String::from_utf8_lossy(text)),
        }
    }
}

#[test]
fn embedded_json_reads_into_a_typed_struct_with_or_without_skipped_fields() {
    // A type of one's own for embedded JSON (a ControllerRevision's `data` is a RawExtension)
    // asks for a struct, an enum, an option, not for any value: serde_json reads the text, or
    // what is left of it once a skipped field is out, with the method the type asked for.
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Revision {
        data: Data,
        revision: i64,
    }
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Data {
        name: String,
        replicas: Option<i32>,
        strategy: Strategy,
    }
    #[derive(serde::Deserialize, Debug, PartialEq)]
    enum Strategy {
        Rolling,
    }
    let text = br#"{"name":"web","replicas":3,"strategy":"Rolling","extra":[1,2]}"#;
    let revision = Writer::default().bytes(2, &Writer::default().bytes(1, text).done()).int(3, 7).done();
    let schema = schema::schema();
    let index = schema.message("apps.v1.ControllerRevision").unwrap();
    let read = |skip: &[&str]| -> Result<Revision, Error> {
        let skip: Vec<String> = skip.iter().map(|s| s.to_string()).collect();
        let paths = crate::codec::skip::Paths::new::<Revision>(&skip).unwrap();
        de::message(schema, index, &revision, &[], paths.root())
    };
    let data = |replicas| Data { name: "web".into(), replicas, strategy: Strategy::Rolling };
    assert_eq!(read(&[]).unwrap(), Revision { data: data(Some(3)), revision: 7 });
    assert_eq!(read(&["data.replicas"]).unwrap(), Revision { data: data(None), revision: 7 });
    // A wrong value in it is serde_json's error, said to be about embedded JSON.
    let bad = br#"{"name":"web","strategy":"Sideways"}"#;
    let revision = Writer::default().bytes(2, &Writer::default().bytes(1, bad).done()).done();
    let got: Result<Revision, Error> = de::message(schema, index, &revision, &[], None);
    let e = got.unwrap_err().to_string();
    assert!(e.contains("embedded JSON") && e.contains("Sideways"), "{e}");
}
