//! Test support: a small JSON reader for the shared vectors file, and a
//! stand-in for the mutex port.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    /// The member `name` of an object; panics with the name when absent.
    pub fn get(&self, name: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(name).unwrap_or_else(|| panic!("no member {name:?}")),
            _ => panic!("{name:?} looked up in a non-object"),
        }
    }
    /// The member `name` of an object, if present.
    pub fn opt(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.get(name),
            _ => None,
        }
    }
    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("want a string, got {other:?}"),
        }
    }
    pub fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("want a number, got {other:?}"),
        }
    }
    pub fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("want an array, got {other:?}"),
        }
    }
    /// Decodes the hex string member `name`; an absent member is empty.
    pub fn hex(&self, name: &str) -> Vec<u8> {
        self.opt(name).map(|v| unhex(v.str())).unwrap_or_default()
    }
}

/// Parses a JSON document; panics with the offset of a syntax error.
pub fn parse_json(text: &str) -> Json {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let v = p.value();
    p.ws();
    assert_eq!(p.i, p.s.len(), "trailing bytes at {}", p.i);
    v
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, b: u8) {
        self.ws();
        assert_eq!(self.s.get(self.i), Some(&b), "want {:?} at {}", b as char, self.i);
        self.i += 1;
    }
    fn peek(&mut self) -> u8 {
        self.ws();
        *self.s.get(self.i).unwrap_or_else(|| panic!("unexpected end"))
    }
    fn value(&mut self) -> Json {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut m = BTreeMap::new();
                if self.peek() == b'}' {
                    self.i += 1;
                    return Json::Obj(m);
                }
                loop {
                    let k = self.string();
                    self.eat(b':');
                    m.insert(k, self.value());
                    if self.peek() == b',' {
                        self.i += 1;
                        continue;
                    }
                    self.eat(b'}');
                    return Json::Obj(m);
                }
            }
            b'[' => {
                self.eat(b'[');
                let mut a = Vec::new();
                if self.peek() == b']' {
                    self.i += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    if self.peek() == b',' {
                        self.i += 1;
                        continue;
                    }
                    self.eat(b']');
                    return Json::Arr(a);
                }
            }
            b'"' => Json::Str(self.string()),
            _ => self.literal(),
        }
    }
    fn literal(&mut self) -> Json {
        let start = self.i;
        while self.i < self.s.len() && !b",]} \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
        match std::str::from_utf8(&self.s[start..self.i]).unwrap() {
            "null" => Json::Null,
            "true" => Json::Bool(true),
            "false" => Json::Bool(false),
            n => Json::Num(n.parse().unwrap_or_else(|_| panic!("bad literal {n:?} at {start}"))),
        }
    }
    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = Vec::new();
        loop {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).expect("utf-8 string"),
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let c = match e {
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'u' => {
                            let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                            self.i += 4;
                            char::from_u32(u32::from_str_radix(hex, 16).unwrap()).expect("no surrogates in the vectors")
                        }
                        other => other as char,
                    };
                    out.extend_from_slice(c.to_string().as_bytes());
                }
                _ => out.push(b),
            }
        }
    }
}

pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex {s:?}");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The shared vectors, clients/testdata/vectors.json.
pub fn vectors() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/vectors.json");
    parse_json(&std::fs::read_to_string(path).expect("read vectors.json"))
}

/// Length of the request at the start of buf, or None while incomplete.
fn request_length(buf: &[u8]) -> Option<usize> {
    let fields = match buf.first()? {
        1 | 5 => 2,
        2..=4 => 1,
        _ => 0,
    };
    let mut n = 1;
    for _ in 0..fields {
        n += 1 + *buf.get(n)? as usize;
    }
    (buf.len() >= n).then_some(n)
}

/// A stand-in for the mutex port on 127.0.0.1: it reads one whole request
/// per connection and answers `answer`, or, with `None`, never answers and
/// reports on `peer_closed` when the client goes away.
pub struct FakeServer {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Vec<u8>>>>,
    pub received: mpsc::Receiver<()>,
    pub peer_closed: mpsc::Receiver<()>,
}

impl FakeServer {
    pub fn start(answer: Option<&'static [u8]>) -> FakeServer {
        FakeServer::start_with(move |_| answer, None)
    }

    /// As start, answering each request with `answer(action byte)`. With
    /// `gate`, each answer waits for a message on it first.
    pub fn start_with(
        answer: impl Fn(u8) -> Option<&'static [u8]> + Send + 'static,
        gate: Option<mpsc::Receiver<()>>,
    ) -> FakeServer {
        let ln = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = ln.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (rx_tx, received) = mpsc::channel();
        let (pc_tx, peer_closed) = mpsc::channel();
        let reqs = requests.clone();
        // The thread ends with the test process; each test binary is short-lived.
        thread::spawn(move || {
            for conn in ln.incoming() {
                let mut conn = match conn {
                    Ok(c) => c,
                    Err(_) => return,
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 512];
                while request_length(&buf).is_none() {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let reply = buf.first().and_then(|&a| answer(a));
                reqs.lock().unwrap().push(buf);
                let _ = rx_tx.send(());
                match reply {
                    Some(a) => {
                        if let Some(g) = &gate {
                            let _ = g.recv();
                        }
                        let _ = conn.write_all(a);
                    }
                    None => {
                        while matches!(conn.read(&mut chunk), Ok(n) if n > 0) {}
                        let _ = pc_tx.send(());
                    }
                }
            }
        });
        FakeServer { addr, requests, received, peer_closed }
    }

    pub fn last_request(&self) -> Vec<u8> {
        self.requests.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

/// A 127.0.0.1 address where nothing listens.
pub fn dead_addr() -> String {
    let ln = TcpListener::bind("127.0.0.1:0").unwrap();
    ln.local_addr().unwrap().to_string()
}

/// The shared vectors of the session protocol, clients/testdata/session-vectors.json.
pub fn session_vectors() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/session-vectors.json");
    parse_json(&std::fs::read_to_string(path).expect("read session-vectors.json"))
}
