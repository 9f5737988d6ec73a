// The bundled types. With tsc (on PATH, or named by LC_TSC, with @types/node
// beside it) test/types/*.mts and *.cts are type-checked as ES module and
// CommonJS users write them, and `await using` compiled by tsc is run
// against a stand-in server. Without it, the declarations are checked
// against the module's exports: every export declared, every declaration
// exported, the ESM types the CommonJS ones.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, realpathSync, rmSync, symlinkSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

import { fakeSessionServer, sessionScript, Tag, Type } from './fakesession.js';

const run = promisify(execFile);
const pkg = fileURLToPath(new URL('..', import.meta.url));
const dcts = readFileSync(join(pkg, 'src/index.d.cts'), 'utf8');

function findTsc() {
  if (process.env.LC_TSC) return process.env.LC_TSC;
  try {
    return execFileSync('sh', ['-c', 'command -v tsc'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}
const tsc = findTsc();

test('every export is declared, and every declaration exported', () => {
  const runtime = createRequire(import.meta.url)('../src/index.cjs');
  const declared = new Set([...dcts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]));
  for (const name of Object.keys(runtime)) assert.ok(declared.has(name), `${name} is exported but not declared`);
  for (const name of declared) assert.ok(name in runtime, `${name} is declared but not exported`);
  // Each error class is declared with its parent as the code has it.
  for (const [, name, parent] of dcts.matchAll(/^export declare class (\w+Error) extends (\w+)/gm)) {
    assert.equal(Object.getPrototypeOf(runtime[name]), runtime[parent] ?? globalThis[parent], `${name} extends ${parent}`);
  }
  assert.equal(readFileSync(join(pkg, 'src/index.d.ts'), 'utf8').trim(), "export * from './index.cjs';");
  const exp = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).exports['.'];
  assert.deepEqual(exp.import, { types: './src/index.d.ts', default: './src/index.js' });
  assert.deepEqual(exp.require, { types: './src/index.d.cts', default: './src/index.cjs' });
});

/** The @types folder beside the tsc found, for @types/node. */
function typeRoots() {
  const modules = dirname(dirname(dirname(realpathSync(tsc)))); // node_modules/typescript/bin/tsc
  const roots = [join(modules, '@types'), join(pkg, 'node_modules/@types')].filter(existsSync);
  return roots.length ? ['--typeRoots', roots.join(',')] : [];
}

test('tsc checks the types as ES module and CommonJS users use them', { skip: tsc ? false : 'no tsc: on PATH, or LC_TSC' }, async () => {
  try {
    await run(tsc, ['-p', join(pkg, 'test/types/tsconfig.json'), ...typeRoots()], { timeout: 120_000 });
  } catch (err) {
    assert.fail(`tsc:\n${err.stdout}${err.stderr}`);
  }
});

test('await using, as tsc compiles it, releases the lock and closes the session', { skip: tsc ? false : 'no tsc: on PATH, or LC_TSC' }, async () => {
  const out = mkdtempSync(join(tmpdir(), 'lc-js-ts-'));
  process.on('exit', () => rmSync(out, { recursive: true, force: true }));
  mkdirSync(join(out, 'node_modules/@locking-center'), { recursive: true });
  symlinkSync(pkg, join(out, 'node_modules/@locking-center/client'));
  try {
    await run(tsc, [join(pkg, 'test/types/dispose.mts'), '--outDir', out, '--rootDir', pkg, '--module', 'nodenext', '--target', 'es2022', '--lib', 'es2022,esnext.disposable', '--types', 'node', ...typeRoots()], { timeout: 120_000 });
  } catch (err) {
    assert.fail(`tsc:\n${err.stdout}${err.stderr}`);
  }
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.ACQUIRE) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: 2n ** 60n, COUNT: 1 });
      if (f.type === Type.RELEASE || f.type === Type.CLOSE) conn.send(Type.OK, f.id);
    }),
  );
  try {
    const { main } = await import(pathToFileURL(join(out, 'test/types/dispose.mjs')).href);
    assert.deepEqual(await main(server.address), [`held ${2n ** 60n}`, 'released', 'closed']);
    const types = server.frames.map((x) => x.frame.type);
    assert.deepEqual(types.slice(-2), [Type.RELEASE, Type.CLOSE]);
  } finally {
    await server.close();
  }
});
