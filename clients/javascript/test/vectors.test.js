// Checks the encoder and the answer table against clients/testdata/vectors.json.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { Client, LockingCenterError, encodeRequest, interpretAnswer } from '../src/index.js';
import { fakeServer, deadAddress } from './fakeserver.js';

const vectors = JSON.parse(readFileSync(new URL('../../testdata/vectors.json', import.meta.url), 'utf8'));
const hex = (s = '') => Buffer.from(s, 'hex');

function callFor(client, action, key, source) {
  switch (action) {
    case 'lock':
      return client.lock(key);
    case 'trylock':
      return client.tryLock(key);
    case 'unlock':
      return client.unlock(key);
    case 'reset-key':
      return client.resetByKey(key);
    case 'reset-source':
      return client.resetBySource(source);
  }
  throw new Error(`unknown action ${action}`);
}

test('encodeRequest matches every request vector', () => {
  assert.ok(vectors.requests.length > 0);
  for (const v of vectors.requests) {
    assert.equal(vectors.actions[v.action], v.action_byte, v.name);
    const got = encodeRequest(v.action_byte, hex(v.key_hex), hex(v.source_hex));
    assert.equal(Buffer.from(got).toString('hex'), v.request_hex, v.name);
  }
});

test('the client sends every vector byte for byte, as bytes and as text', async () => {
  const server = await fakeServer(Buffer.from('+'));
  try {
    for (const v of vectors.requests) {
      const key = hex(v.key_hex);
      const source = hex(v.source_hex);
      const forms = [[key, source]];
      const dec = new TextDecoder('utf-8', { fatal: true });
      try {
        forms.push([dec.decode(key), dec.decode(source)]);
      } catch {
        // not UTF-8: bytes only
      }
      for (const [k, s] of forms) {
        await callFor(new Client(server.address, { source: s }), v.action, k, s);
        assert.equal(server.requests.at(-1).toString('hex'), v.request_hex, `${v.name} (${typeof k})`);
      }
    }
  } finally {
    await server.close();
  }
});

test('interpretAnswer matches every answer vector', () => {
  for (const v of vectors.answers) {
    assert.equal(interpretAnswer(vectors.actions[v.action], hex(v.answer_hex)[0]), v.result, `${v.action} ${v.answer_hex}`);
  }
});

test('the client reports every answer vector', async () => {
  for (const v of vectors.answers) {
    const server = await fakeServer(hex(v.answer_hex));
    try {
      let got;
      try {
        const returned = await callFor(new Client(server.address, { source: 'vectors' }), v.action, 'k', 'vectors');
        got = returned === false ? 'busy' : 'ok';
      } catch (err) {
        assert.ok(err instanceof LockingCenterError, String(err));
        got = 'failed';
      }
      assert.equal(got, v.result, `${v.action} ${v.answer_hex}`);
    } finally {
      await server.close();
    }
  }
});

test('invalid keys and sources are refused before connecting', async () => {
  const c = new Client(await deadAddress());
  for (const v of vectors.invalid_keys) {
    for (const call of ['lock', 'tryLock', 'unlock', 'wait', 'resetByKey']) {
      await assert.rejects(c[call](hex(v.key_hex)), { code: 'ERR_INVALID_KEY' }, `${call} ${v.name}`);
    }
  }
  for (const v of vectors.invalid_sources) {
    await assert.rejects(c.resetBySource(hex(v.source_hex)), { code: 'ERR_INVALID_SOURCE' }, v.name);
    assert.throws(() => new Client(c.address, { source: hex(v.source_hex) }), { code: 'ERR_INVALID_SOURCE' }, v.name);
  }
});
