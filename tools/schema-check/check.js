// Validates JSON documents against a JSON Schema (draft 2020-12) with Ajv, an
// implementation independent of trainer's own validation.
// Usage: node check.js SCHEMA.json DOC.json...
// Prints "valid DOC" or "invalid DOC: <errors>" per document; exits 0 when the
// schema itself compiles (whatever the documents), 3 when it does not.
"use strict";
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");

const [schemaPath, ...docs] = process.argv.slice(2);
// strictRequired is off: the schema requires sections in if/then branches that
// name them without redefining their properties, which is valid JSON Schema.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
let validate;
try {
  validate = ajv.compile(JSON.parse(fs.readFileSync(schemaPath, "utf8")));
} catch (e) {
  console.log(`schema error: ${e.message}`);
  process.exit(3);
}
for (const doc of docs) {
  const ok = validate(JSON.parse(fs.readFileSync(doc, "utf8")));
  if (ok) console.log(`valid ${doc}`);
  else console.log(`invalid ${doc}: ${ajv.errorsText(validate.errors)}`);
}
