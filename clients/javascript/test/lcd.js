// Real lcd servers for the live tests: built once from this repository
// (go build -o <tmp>/lcd ./cmd/lcd, or LC_LCD names a binary), started on
// free 127.0.0.1 ports, stopped when the test ends.

import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));

let built;
/** The lcd binary, or null (with why) when it cannot be had. */
export function lcdBinary() {
  built ??= (async () => {
    if (process.env.LC_LCD) return { bin: process.env.LC_LCD };
    if (!existsSync(join(root, 'cmd/lcd'))) return { why: 'not in the repository' };
    const dir = mkdtempSync(join(tmpdir(), 'lc-js-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    const bin = join(dir, 'lcd');
    try {
      await run('go', ['build', '-o', bin, './cmd/lcd'], { cwd: root, timeout: 300_000 });
    } catch (err) {
      return { why: `go build failed: ${err.code === 'ENOENT' ? 'no go' : err.stderr || err.message}` };
    }
    return { bin };
  })();
  return built;
}

/**
 * Starts lcd with env added; resolves to { mutex, manager, proc, stop() }
 * once it logs its addresses. t (a node:test context) stops it at the end.
 */
export async function startLcd(t, env = {}) {
  const { bin, why } = await lcdBinary();
  if (!bin) throw new Error(`no lcd: ${why}`);
  const proc = spawn(bin, [], {
    env: { ...process.env, BIND_ADDRESS: '127.0.0.1:0', LOG_FORMAT: 'text', SHUTDOWN_TIMEOUT: '1s', SESSION_TTL_MIN: '1s', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const started = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lcd did not start:\n${log}`)), 20_000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /msg="lcd started".* mutex=(\S+).* manager=(\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ mutex: m[1], manager: m[2] });
      }
    });
    proc.on('exit', (code) => reject(new Error(`lcd exited ${code}:\n${log}`)));
  });
  const stop = () => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
  };
  t.after(stop);
  return { ...(await started), proc, stop, log: () => log };
}
