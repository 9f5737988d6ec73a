//! Checks the encoder and the answer table against clients/testdata/vectors.json.

mod common;

use common::{dead_addr, to_hex, vectors, FakeServer, Json};
use locking_center::{encode_request, interpret_answer, Action, Client, Error, Outcome};

fn action(v: &Json, name: &str) -> Action {
    let byte = v.get("actions").get(name).num() as u8;
    match byte {
        1 => Action::Lock,
        2 => Action::Unlock,
        3 => Action::ResetKey,
        4 => Action::ResetSource,
        5 => Action::TryLock,
        _ => panic!("unknown action byte {byte}"),
    }
}

/// Runs the client call for `action` and names its result as the vectors do.
fn result_of(c: &Client, action: &str, key: &[u8], source: &[u8]) -> (&'static str, Option<Error>) {
    let r = match action {
        "lock" => c.lock(key).map(|_| true),
        "trylock" => c.try_lock(key),
        "unlock" => c.unlock(key).map(|_| true),
        "reset-key" => c.reset_by_key(key).map(|_| true),
        "reset-source" => c.reset_by_source(source).map(|_| true),
        other => panic!("unknown action {other}"),
    };
    match r {
        Ok(true) => ("ok", None),
        Ok(false) => ("busy", None),
        Err(e) => ("failed", Some(e)),
    }
}

#[test]
fn encode_request_matches_vectors() {
    let v = vectors();
    let requests = v.get("requests").arr();
    assert!(!requests.is_empty());
    for r in requests {
        let name = r.get("name").str();
        let a = action(&v, r.get("action").str());
        assert_eq!(a as u8 as f64, r.get("action_byte").num(), "{name}");
        let got = encode_request(a, &r.hex("key_hex"), &r.hex("source_hex")).unwrap();
        assert_eq!(to_hex(&got), r.get("request_hex").str(), "{name}");
    }
}

#[test]
fn client_sends_vector_bytes_as_bytes_and_text() {
    let v = vectors();
    let server = FakeServer::start(Some(b"+"));
    for r in v.get("requests").arr() {
        let (key, source) = (r.hex("key_hex"), r.hex("source_hex"));
        let mut forms = vec![(key.clone(), source.clone())];
        if let (Ok(k), Ok(s)) = (String::from_utf8(key.clone()), String::from_utf8(source.clone())) {
            // the same bytes again, passed as text
            forms.push((k.into_bytes(), s.into_bytes()));
        }
        for (k, s) in forms {
            let c = Client::new(&server.addr).with_source(&s);
            let (got, err) = result_of(&c, r.get("action").str(), &k, &s);
            assert_eq!(got, "ok", "{}: {err:?}", r.get("name").str());
            assert_eq!(to_hex(&server.last_request()), r.get("request_hex").str(), "{}", r.get("name").str());
        }
    }
    let c = Client::new(&server.addr).with_source("text source");
    c.lock(String::from("schlüssel")).unwrap();
    assert_eq!(server.last_request(), b"\x01\x0aschl\xc3\xbcssel\x0btext source");
}

#[test]
fn interpret_answer_matches_vectors() {
    let v = vectors();
    for a in v.get("answers").arr() {
        let act = action(&v, a.get("action").str());
        let want = match a.get("result").str() {
            "ok" => Outcome::Ok,
            "busy" => Outcome::Busy,
            "failed" => Outcome::Failed,
            other => panic!("unknown result {other}"),
        };
        let byte = common::unhex(a.get("answer_hex").str())[0];
        assert_eq!(interpret_answer(act, byte), want, "{act} {byte:#x}");
    }
}

#[test]
fn client_reports_answer_vectors() {
    let v = vectors();
    for a in v.get("answers").arr() {
        let answer: &'static [u8] = Box::leak(common::unhex(a.get("answer_hex").str()).into_boxed_slice());
        let server = FakeServer::start(Some(answer));
        let c = Client::new(&server.addr).with_source("vectors");
        let (got, err) = result_of(&c, a.get("action").str(), b"k", b"vectors");
        assert_eq!(got, a.get("result").str(), "{} {:?}: {err:?}", a.get("action").str(), answer);
        if let Some(e) = err {
            assert!(matches!(e, Error::Refused | Error::Protocol(_)), "{e:?}");
        }
    }
}

#[test]
fn invalid_keys_and_sources_refused_before_connecting() {
    let v = vectors();
    let c = Client::new(dead_addr());
    for k in v.get("invalid_keys").arr() {
        let key = k.hex("key_hex");
        let calls: [(&str, locking_center::Result<()>); 5] = [
            ("lock", c.lock(&key)),
            ("try_lock", c.try_lock(&key).map(drop)),
            ("unlock", c.unlock(&key)),
            ("wait", c.wait(&key)),
            ("reset_by_key", c.reset_by_key(&key)),
        ];
        for (name, r) in calls {
            assert!(
                matches!(r, Err(Error::InvalidKey { len }) if len == key.len()),
                "{name} {}: {r:?}",
                k.get("name").str()
            );
        }
        assert!(matches!(encode_request(Action::Lock, &key, b""), Err(Error::InvalidKey { .. })));
    }
    for s in v.get("invalid_sources").arr() {
        let source = s.hex("source_hex");
        let r = c.reset_by_source(&source);
        assert!(matches!(r, Err(Error::InvalidSource { .. })), "{}: {r:?}", s.get("name").str());
        let r = Client::new(c.addr()).with_source(&source).lock("k");
        assert!(matches!(r, Err(Error::InvalidSource { .. })), "{}: {r:?}", s.get("name").str());
    }
}
