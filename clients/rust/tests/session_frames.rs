//! The session codec against clients/testdata/session-vectors.json, byte
//! for byte, and mutated and random frames, which give the format error
//! and nothing else.

mod common;

use std::time::Duration;

use common::{session_vectors, to_hex, unhex, Json};
use locking_center::frame::{decode, parse_fields, tag, typ, Field, Frame, MAX_FRAME_LEN, PREFACE};
use locking_center::session::AcquireOptions;

fn fields_of(v: &Json) -> Vec<Field> {
    v.arr().iter().map(|f| Field { tag: f.get("tag").num() as u8, value: f.hex("value_hex") }).collect()
}

fn frame_of(v: &Json) -> Frame {
    Frame::new(v.get("type").num() as u8, v.get("id").num() as u64, fields_of(v.get("fields")))
}

#[test]
fn preface_matches() {
    assert_eq!(to_hex(PREFACE), session_vectors().get("preface_hex").str());
}

#[test]
fn encode_matches_every_frame() {
    let v = session_vectors();
    for f in v.get("frames").arr() {
        let name = f.get("name").str();
        assert_eq!(to_hex(&frame_of(f).encode()), f.get("frame_hex").str(), "{name}");
    }
}

#[test]
fn decode_matches_every_frame() {
    let v = session_vectors();
    for f in v.get("frames").arr() {
        let name = f.get("name").str();
        let bytes = unhex(f.get("frame_hex").str());
        let (got, n) = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")).expect(name);
        assert_eq!(n, bytes.len(), "{name}");
        assert_eq!(got, frame_of(f), "{name}");
        // Every shorter prefix is incomplete, never an error.
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), Ok(None), "{name} cut at {cut}");
        }
    }
}

#[test]
fn list_items_decode_to_their_fields() {
    let v = session_vectors();
    let f = v.get("frames").arr().iter().find(|f| f.get("name").str() == "welcome of a resume").unwrap();
    let (got, _) = decode(&unhex(f.get("frame_hex").str())).unwrap().unwrap();
    let held = got.items(tag::HELD);
    assert_eq!(held.len(), 2);
    assert_eq!(locking_center::frame::find(&held[0], tag::KEY), Some(&b"jobs/nightly"[..]));
    assert_eq!(locking_center::frame::find_uint(&held[1], tag::LEFT_MS), Some(0x7148));
    assert_eq!(got.items(tag::PARKED).len(), 1);
}

/// The frames the session builds from its options are the vectors'.
#[test]
fn acquire_options_encode_as_the_vectors() {
    let v = session_vectors();
    let want = |name: &str| {
        v.get("frames").arr().iter().find(|f| f.get("name").str() == name).unwrap().get("frame_hex").str().to_string()
    };
    let every = AcquireOptions::new()
        .wait(Duration::from_secs(5))
        .lease(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(2))
        .shared()
        .priority(-2)
        .reentrant()
        .owner("worker-3");
    let f = Frame::new(typ::ACQUIRE, 4, every.fields(b"orders/batch-7").unwrap());
    assert_eq!(to_hex(&f.encode()), want("acquire, every option"));
    let f = Frame::new(typ::ACQUIRE, 5, AcquireOptions::new().limit(4).fields(b"pool").unwrap());
    assert_eq!(to_hex(&f.encode()), want("acquire, a semaphore"));
    let f = Frame::new(typ::ACQUIRE, 3, AcquireOptions::new().fields(&[0x00, 0xff, 0x80]).unwrap());
    assert_eq!(to_hex(&f.encode()), want("acquire, wait for ever, a binary key"));
    let note = "deploy 4.2 by ana from ci-7 \u{b7} run 8812";
    let f = Frame::new(typ::ACQUIRE, 2, AcquireOptions::new().note(note).fields(b"deploy/prod").unwrap());
    let want_note = want("acquire with a holder's note");
    assert_eq!(to_hex(&f.encode())[26..], want_note[26..], "fields of the note");
}

#[test]
fn options_refuse_what_the_protocol_cannot_carry() {
    assert!(AcquireOptions::new().fields(b"").is_err());
    assert!(AcquireOptions::new().fields(&[b'k'; 128]).is_err());
    assert!(AcquireOptions::new().owner("o".repeat(128)).fields(b"k").is_err());
    assert!(AcquireOptions::new().note("n".repeat(1025)).fields(b"k").is_err());
}

#[test]
fn malformed_frames_are_format_errors() {
    let ping = Frame::new(typ::PING, 1, vec![]).encode();
    let mut short = ping.clone();
    short[3] = 8; // a length under 9
    assert!(decode(&short).is_err());
    let mut long = ping.clone();
    long[..4].copy_from_slice(&((MAX_FRAME_LEN as u32) + 1).to_be_bytes());
    assert!(decode(&long).is_err(), "a length over the limit fails before the frame is there");
    let twice = Frame::new(typ::OK, 1, vec![Field::u32(tag::LEFT_MS, 1), Field::u32(tag::LEFT_MS, 2)]).encode();
    assert!(decode(&twice).is_err(), "a tag given twice");
    let sized = Frame::new(typ::OK, 1, vec![Field::bytes(tag::LEFT_MS, [1, 2])]).encode();
    assert!(decode(&sized).is_err(), "a fixed-size field of another size");
    let over = Frame::new(typ::REFUSED, 1, vec![Field::bytes(tag::MESSAGE, vec![b'x'; 1025])]).encode();
    assert!(decode(&over).is_err(), "a byte string over its limit");
    let past = [0, 0, 0, 12, typ::OK, 0, 0, 0, 0, 0, 0, 0, 1, tag::LEFT_MS, 0, 4];
    assert!(decode(&past).is_err(), "a field past the end of its frame");
    let bad_item = Frame::new(typ::WELCOME, 1, vec![Field { tag: tag::HELD, value: vec![tag::TOKEN, 0, 9] }]).encode();
    assert!(decode(&bad_item).is_err(), "an item whose field runs past its end");
    // Lists repeat; unknown tags are kept for the session to ignore.
    let ok = Frame::new(
        typ::WELCOME,
        1,
        vec![
            Field::item(tag::PARKED, &[Field::u64(tag::REQUEST, 5)]),
            Field::item(tag::PARKED, &[]),
            Field::u8(0x7f, 1),
        ],
    );
    assert_eq!(decode(&ok.encode()).unwrap().unwrap().0, ok);
}

/// A small generator, seeded, so that a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every frame of the vectors, mutated, and random bytes, decode to a
/// frame, to "incomplete" or to the format error: never a panic, and a
/// frame decoded re-encodes to the bytes it came from.
#[test]
fn mutated_and_random_frames_give_only_the_format_error() {
    let v = session_vectors();
    let frames: Vec<Vec<u8>> = v.get("frames").arr().iter().map(|f| unhex(f.get("frame_hex").str())).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut decoded, mut refused) = (0, 0);
    for round in 0..20_000 {
        let mut b = if round % 4 == 3 {
            (0..rng.below(80)).map(|_| rng.next() as u8).collect()
        } else {
            frames[rng.below(frames.len())].clone()
        };
        for _ in 0..1 + rng.below(3) {
            if b.is_empty() {
                break;
            }
            let i = rng.below(b.len());
            match rng.below(3) {
                0 => b[i] = rng.next() as u8,
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, rng.next() as u8),
            }
        }
        match decode(&b) {
            Ok(Some((f, n))) => {
                decoded += 1;
                assert_eq!(f.encode(), b[..n], "a decoded frame re-encodes to its bytes");
            }
            Ok(None) => {}
            Err(_) => refused += 1,
        }
        let _ = parse_fields(&b);
    }
    assert!(decoded > 0 && refused > 0, "decoded {decoded}, refused {refused}");
}
