// Runs the live scenarios of a conformance program: each bounded in time,
// one line per scenario on standard output, "ok <id>" or
// "FAIL <id>: <reason>". Resolves to whether every scenario passed.
//
//   await runScenarios(scenarios, { limit, only, after })
//
// only: the ids to run (all when empty); after(id): called once a scenario
// has ended, whatever happened, before the next starts.

export async function runScenarios(scenarios, { limit, only = [], after } = {}) {
  let passed = true;
  for (const [id, scenario] of Object.entries(scenarios)) {
    if (only.length && !only.includes(id)) continue;
    let timer;
    const bound = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`not done after ${limit} ms`)), limit);
    });
    try {
      await Promise.race([scenario(), bound]);
      console.log(`ok ${id}`);
    } catch (err) {
      passed = false;
      console.log(`FAIL ${id}: ${String(err?.message ?? err).replaceAll('\n', ' ')}`);
    } finally {
      clearTimeout(timer);
      await after?.(id);
    }
  }
  return passed;
}
