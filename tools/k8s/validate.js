#!/usr/bin/env node
// Offline checks of the deployment files, without a cluster:
//  1. every Kubernetes object validates against the Kubernetes schemas
//     (kubernetes-models; unknown fields are not caught by them);
//  2. a kustomization's resources exist, its replicas/images/patches name
//     real objects, and the ps-submit Job's PS_SERVERS / PS_WORKERS agree
//     with the replicas it sets;
//  3. every --flag given to one of our binaries (container command/args, the
//     shell scripts inside containers, the sbatch script) is a real flag of
//     that binary, taken from its own --helpfull (Abseil) or --help (psctl).
//
//   node validate.js [--bin NAME=PATH]... [--shell FILE]... PATH...
// PATH: a .yaml file, a directory (its *.yaml), or - for stdin. NAME is one of
// coordinator, ps_server, ps_worker, psctl; without --bin for a binary its
// flags are not checked (and that is said). Exit 0 if everything passed.
"use strict";

const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const yaml = require("js-yaml");

const BINARIES = ["coordinator", "ps_server", "ps_worker", "psctl"];
// Shell words that stand for one of our binaries in our scripts.
const ALIASES = {
  $coordinator_bin: "coordinator",
  $server_bin: "ps_server",
  $worker_bin: "ps_worker",
  $psctl_bin: "psctl",
  $psctl: "psctl",
  "${psctl[@]}": "psctl",
};

let failures = 0;
let checkedObjects = 0;
let checkedFlags = 0;
function fail(where, msg) {
  failures++;
  console.log(`FAIL ${where}: ${msg}`);
}

// ---- flags of the real binaries ------------------------------------------

const binPaths = {};
const helpCache = {};
function helpText(args) {
  const key = args.join(" ");
  if (!(key in helpCache)) {
    const [name, ...rest] = args;
    const flag = name === "psctl" ? "--help" : "--helpfull";
    let text;
    try {
      text = execFileSync(binPaths[name], [...rest, flag], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
        timeout: 20000,
      });
    } catch (e) {
      // Abseil exits non-zero after printing the help.
      text = (e.stdout || "") + (e.stderr || "");
    }
    helpCache[key] = text;
  }
  return helpCache[key];
}
function flagsIn(text, abseil) {
  const out = new Set();
  const re = abseil ? /^\s+--([A-Za-z0-9_]+) \(/gm : /(?:^|[\s,])--([A-Za-z0-9_-]+)/gm;
  let m;
  while ((m = re.exec(text))) out.add(m[1]);
  return out;
}
function knownFlags(name, subcommands) {
  if (name !== "psctl") {
    const flags = flagsIn(helpText([name]), true);
    if (flags.size === 0) throw new Error(`no flags found in ${binPaths[name]} --helpfull`);
    return flags;
  }
  const flags = new Set();
  for (let i = 0; i <= subcommands.length; i++) {
    for (const f of flagsIn(helpText(["psctl", ...subcommands.slice(0, i)]), false)) flags.add(f);
  }
  return flags;
}

const PSCTL_NESTED = new Set(["cluster", "slurm", "k8s"]);
// Checks the flags of one command line (argv[0] is ours).
function checkArgv(where, name, argv) {
  if (!binPaths[name]) {
    console.log(`note ${where}: ${name} flags not checked (no --bin ${name}=PATH)`);
    return;
  }
  const flags = [];
  const subs = [];
  for (const a of argv) {
    const m = /^--([A-Za-z0-9_-]+)(=.*)?$/.exec(a);
    if (m) {
      flags.push(m[1]);
    } else if (name === "psctl" && /^[a-z][a-z0-9]*$/.test(a) &&
               (subs.length === 0 || (subs.length === 1 && PSCTL_NESTED.has(subs[0])))) {
      subs.push(a);
    }
  }
  const known = knownFlags(name, subs);
  for (const f of flags) {
    checkedFlags++;
    const bare = f.startsWith("no") && known.has(f.slice(2)) ? f.slice(2) : f;
    if (!known.has(bare)) {
      fail(where, `--${f} is not a flag of ${[name, ...subs].join(" ")} (see its --help${name === "psctl" ? "" : "full"})`);
    }
  }
}

// Finds our binaries in shell text and checks the flags that follow each,
// up to the end of its command (a line end, ; && || | or a backquote).
function checkShell(where, text) {
  const joined = text.replace(/\\\n/g, " ");
  joined.split("\n").forEach((line, i) => {
    if (/^\s*#/.test(line)) return;
    const words = line.split(/\s+/).filter(Boolean);
    let cmd = null;
    let atStart = true;  // command position: a literal binary name counts
    const flush = () => {
      if (cmd) checkArgv(`${where}:${i + 1}`, cmd.name, cmd.argv);
      cmd = null;
      atStart = true;
    };
    for (let w of words) {
      if (/^(;|&&|\|\||\||&|\)|do|then|\(|`)$/.test(w)) {
        flush();
        continue;
      }
      const ends = /[;`)]$/.test(w) && !/\$\{psctl\[@\]\}$/.test(w);
      if (/^[`(]|^\$\(/.test(w)) atStart = true;
      w = w.replace(/^(\$\(|[`(])+/, "");
      let bare = w.replace(/["']/g, "").replace(/[;`)]+$/, "");
      const assign = /^[A-Za-z_][A-Za-z0-9_]*=(.*)$/.exec(bare);
      if (assign && !bare.startsWith("--")) {
        bare = assign[1].replace(/^\(/, "");
        atStart = true;
      }
      const literal = atStart && BINARIES.includes(path.basename(bare)) ? path.basename(bare) : null;
      const name = ALIASES[bare] || literal;
      atStart = false;
      if (name && !bare.startsWith("-")) {
        flush();
        atStart = false;
        cmd = { name, argv: [] };
      } else if (cmd) {
        cmd.argv.push(bare);
      }
      if (ends) flush();
    }
    flush();
  });
}

// ---- Kubernetes objects ----------------------------------------------------

function modelFor(doc) {
  const { apiVersion, kind } = doc;
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    return null;
  }
  return mod[kind] || null;
}

function podSpecOf(doc) {
  const spec = doc.spec || {};
  if (doc.kind === "Pod") return spec;
  if (doc.kind === "CronJob") return ((spec.jobTemplate || {}).spec || {}).template?.spec;
  return (spec.template || {}).spec;
}

function checkContainers(where, doc) {
  const pod = podSpecOf(doc);
  if (!pod) return;
  for (const c of [...(pod.initContainers || []), ...(pod.containers || [])]) {
    const at = `${where} container ${c.name}`;
    const argv = [...(c.command || []), ...(c.args || [])];
    if (argv.length === 0) continue;
    const name = path.basename(String(argv[0]));
    if (BINARIES.includes(name)) {
      checkArgv(at, name, argv.slice(1).map(String));
    } else if (/^(\/bin\/|\/usr\/bin\/)?(ba)?sh$/.test(String(argv[0]))) {
      const i = argv.indexOf("-c");
      if (i >= 0 && i + 1 < argv.length) checkShell(at, String(argv[i + 1]));
    }
  }
}

function checkKustomization(file, k, objectsByFile) {
  const dir = path.dirname(file);
  const objects = [];
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    if (!fs.existsSync(p)) {
      fail(file, `resource ${r} does not exist`);
      continue;
    }
    objects.push(...(objectsByFile[path.resolve(p)] || loadObjects(p)));
  }
  const find = (kind, name) => objects.find((o) => (!kind || o.kind === kind) && o.metadata && o.metadata.name === name);
  const counts = {};
  for (const r of k.replicas || []) {
    const o = objects.find((x) => ["Deployment", "StatefulSet", "ReplicaSet"].includes(x.kind) && x.metadata.name === r.name);
    if (!o) fail(file, `replicas: no Deployment/StatefulSet named ${r.name}`);
    if (!Number.isInteger(r.count) || r.count < 1) fail(file, `replicas: ${r.name} count must be an integer >= 1`);
    counts[r.name] = r.count;
  }
  const images = new Set();
  for (const o of objects) {
    const pod = podSpecOf(o);
    for (const c of (pod && pod.containers) || []) images.add(String(c.image).split(":")[0]);
  }
  for (const im of k.images || []) {
    if (!images.has(im.name)) fail(file, `images: no container uses image ${im.name}`);
  }
  for (const p of k.patches || []) {
    const t = p.target || {};
    const o = find(t.kind, t.name);
    if (!o) {
      fail(file, `patches: no ${t.kind} named ${t.name}`);
      continue;
    }
    const ops = typeof p.patch === "string" ? yaml.load(p.patch) : [];
    for (const op of Array.isArray(ops) ? ops : []) {
      const m = /^\/spec\/template\/spec\/containers\/(\d+)\/env\/(\d+)\/value$/.exec(op.path || "");
      if (!m) continue;
      const c = podSpecOf(o).containers[+m[1]];
      const env = c && (c.env || [])[+m[2]];
      if (!env) {
        fail(file, `patches: ${op.path} does not exist in ${t.kind}/${t.name}`);
        continue;
      }
      const of = { PS_SERVERS: "ps-server", PS_WORKERS: "ps-worker" }[env.name];
      if (of && String(counts[of]) !== String(op.value)) {
        fail(file, `${env.name} of ${t.name} is ${op.value} but ${of} has ${counts[of]} replicas`);
      }
    }
  }
  console.log(`ok   ${file}: Kustomization (${objects.length} objects)`);
}

function loadObjects(p) {
  const text = p === "-" ? fs.readFileSync(0, "utf8") : fs.readFileSync(p, "utf8");
  return yaml.loadAll(text).filter((d) => d && typeof d === "object");
}

function checkFile(file, objectsByFile, kustomizations) {
  let docs;
  try {
    docs = loadObjects(file);
  } catch (e) {
    fail(file, `not YAML: ${e.message}`);
    return;
  }
  if (file !== "-") objectsByFile[path.resolve(file)] = docs;
  docs.forEach((doc) => {
    const where = `${file}: ${doc.kind}/${(doc.metadata || {}).name}`;
    if (doc.kind === "Kustomization") {
      kustomizations.push([file, doc]);
      return;
    }
    const Model = modelFor(doc);
    if (!Model) {
      fail(where, `unknown apiVersion/kind ${doc.apiVersion}/${doc.kind}`);
      return;
    }
    try {
      new Model(doc).validate();
    } catch (e) {
      fail(where, `schema: ${e.message}`);
      return;
    }
    checkedObjects++;
    checkContainers(where, doc);
    console.log(`ok   ${where}`);
  });
}

function main(argv) {
  const inputs = [];
  const shells = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--bin") {
      const [name, p] = argv[++i].split(/=(.*)/s);
      if (!BINARIES.includes(name)) throw new Error(`--bin: unknown binary ${name}`);
      if (!fs.existsSync(p)) throw new Error(`--bin ${name}: ${p} does not exist`);
      binPaths[name] = p;
    } else if (argv[i] === "--shell") {
      shells.push(argv[++i]);
    } else {
      inputs.push(argv[i]);
    }
  }
  const files = [];
  for (const p of inputs) {
    if (p !== "-" && fs.statSync(p).isDirectory()) {
      for (const f of fs.readdirSync(p).sort()) {
        if (/\.ya?ml$/.test(f)) files.push(path.join(p, f));
      }
    } else {
      files.push(p);
    }
  }
  const objectsByFile = {};
  const kustomizations = [];
  for (const f of files) checkFile(f, objectsByFile, kustomizations);
  for (const [f, k] of kustomizations) checkKustomization(f, k, objectsByFile);
  for (const s of shells) {
    checkShell(s, fs.readFileSync(s, "utf8"));
    console.log(`ok   ${s}: shell flags scanned`);
  }
  console.log(`validate: ${checkedObjects} objects, ${checkedFlags} flags checked, ${failures} failures`);
  return failures === 0 ? 0 : 1;
}

try {
  process.exitCode = main(process.argv.slice(2));
} catch (e) {
  console.log(`validate: error: ${e.message}`);
  process.exitCode = 2;
}
