// Validates Prometheus Operator objects (PodMonitor, PrometheusRule)
// against the operator's own CRD schemas, as the npm package
// @kubernetes-models/prometheus-operator compiles them (ajv). Reads a JSON
// array of objects on stdin; prints "KIND NAME ok" or "KIND NAME: what is
// wrong" per object, and exits 1 if any is wrong, 2 if a kind is unknown.
// Run: node validate_prometheus_operator.mjs NODE_MODULES_DIR < objects.json
const [modules] = process.argv.slice(2);
const v1 = await import(`${modules}/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js`);
let input = "";
for await (const chunk of process.stdin) input += chunk;
let code = 0;
for (const object of JSON.parse(input)) {
    const name = `${object.kind} ${object.metadata?.name}`;
    const Model = v1[object.kind];
    if (object.apiVersion !== "monitoring.coreos.com/v1" || typeof Model !== "function") {
        console.log(`${name}: not a monitoring.coreos.com/v1 kind this package knows`);
        code = 2;
        continue;
    }
    try {
        new Model(object).validate();
        console.log(`${name} ok`);
    } catch (e) {
        console.log(`${name}: ${e.message}`);
        code = code || 1;
    }
}
process.exit(code);
