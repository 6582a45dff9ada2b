//! Why the cluster refused the debug pod, in one sentence with what to do.
//!
//! The debug pod is privileged, on the host's namespaces, with the node's
//! `/` mounted: exactly what the policies of a namespace are there to
//! refuse. kubectl says the API server's refusal in its words, which name
//! the mechanism (Pod Security admission, an OpenShift SCC, a policy
//! engine's webhook, a ResourceQuota, RBAC, a namespace being deleted) but
//! not what the on-call should do about it: that is said here. Pure: it
//! reads kubectl's message, so each refusal is tested on the words real
//! clusters print.

/// What `kubectl create` said when the debug pod was refused in
/// `namespace`, in one sentence with the fix; `None` when it is no
/// refusal of the pod (a cluster that cannot be reached, say).
/// `podstuck_namespace` is where the install put podstuck, the way out
/// the fix names.
pub fn refusal(said: &str, namespace: &str, podstuck_namespace: &str) -> Option<String> {
    let said = said.trim();
    let elsewhere = format!("kubectl podstuck ... --namespace-for-debug {podstuck_namespace} (podstuck's namespace, which its install makes with Pod Security privileged) or kube-system");
    if let Some(level) = between(said, "violates PodSecurity \"", "\"") {
        let level = level.split(':').next().unwrap_or(level);
        return Some(format!(
            "namespace {namespace}'s Pod Security admission (enforce level {level}) refuses the debug pod, which is privileged on the node's namespaces: run {elsewhere}, or have an admin allow it there: kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=privileged --overwrite"
        ));
    }
    if said.contains("unable to validate against any security context constraint") {
        return Some(format!(
            "OpenShift's security context constraints refuse the privileged debug pod in namespace {namespace}: run {elsewhere}, or have an admin let that namespace's default service account use the privileged SCC: oc adm policy add-scc-to-user privileged -z default -n {namespace}"
        ));
    }
    if let Some(webhook) = between(said, "admission webhook \"", "\" denied the request") {
        let why = said.split_once("denied the request:").map(|(_, why)| why.trim()).unwrap_or("");
        let engine = if webhook.contains("kyverno") {
            "Kyverno"
        } else if webhook.contains("gatekeeper") {
            "Gatekeeper"
        } else {
            "a policy"
        };
        return Some(format!(
            "{engine}'s admission webhook {webhook} refuses the debug pod in namespace {namespace}{}: run {elsewhere} if the policy exempts it, or have an admin exempt podstuck's debug pods (label app.kubernetes.io/name=kubectl-podstuck) in {namespace}",
            if why.is_empty() { String::new() } else { format!(" ({})", first_line(why)) }
        ));
    }
    if let Some(quota) = between(said, "exceeded quota: ", ",") {
        return Some(format!(
            "namespace {namespace}'s ResourceQuota {quota} has no room for the debug pod (it asks for cpu 100m, memory 128Mi, limits cpu 1, memory 512Mi): run {elsewhere}, or free room in {namespace}"
        ));
    }
    if said.contains("failed quota:") {
        return Some(format!(
            "namespace {namespace}'s ResourceQuota refuses the debug pod ({}): run {elsewhere}",
            first_line(said.split_once("failed quota:").map(|(_, w)| w.trim()).unwrap_or(said))
        ));
    }
    if said.contains("because it is being terminated") {
        return Some(format!("namespace {namespace} is being deleted and takes no new pod: run {elsewhere}"));
    }
    if said.contains("cannot create resource \"pods\"") {
        return Some(format!(
            "you may not create pods in namespace {namespace} (RBAC): the debug pods' rights are the Role podstuck-on-call-debug-pods in namespace {podstuck_namespace} (deploy/components/on-call binds it to the group podstuck-on-call): ask to be in that group and run with --namespace-for-debug {podstuck_namespace}, or choose a namespace where you may create pods"
        ));
    }
    if let Some((_, why)) = said.split_once("is forbidden: ") {
        return Some(format!(
            "the cluster refuses the debug pod in namespace {namespace} ({}): run {elsewhere}",
            first_line(why)
        ));
    }
    None
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &text[text.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl 1.30 prints, each as a real API server words it.
    const POD_SECURITY: &str = r#"Error from server (Forbidden): error when creating "STDIN": pods "podstuck-8f14e45f-x7k2p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true, hostIPC=true), privileged (container "podstuck" must not set securityContext.privileged=true), hostPath volumes (volume "host-root")"#;
    const SCC: &str = r#"Error from server (Forbidden): error when creating "STDIN": pods "podstuck-8f14e45f-x7k2p" is forbidden: unable to validate against any security context constraint: [provider "anyuid": Forbidden: not usable by user or serviceaccount, spec.containers[0].securityContext.privileged: Invalid value: true: Privileged containers are not allowed]"#;
    const KYVERNO: &str = r#"Error from server: error when creating "STDIN": admission webhook "validate.kyverno.svc-fail" denied the request:

resource Pod/shop/podstuck-8f14e45f-x7k2p was blocked due to the following policies

disallow-privileged-containers:
  privileged-containers: 'validation error: Privileged mode is disallowed.'"#;
    const GATEKEEPER: &str = r#"Error from server (Forbidden): error when creating "STDIN": admission webhook "validation.gatekeeper.sh" denied the request: [psp-privileged-container] Privileged container is not allowed: podstuck, securityContext: {"privileged": true}"#;
    const QUOTA: &str = r#"Error from server (Forbidden): error when creating "STDIN": pods "podstuck-8f14e45f-x7k2p" is forbidden: exceeded quota: compute, requested: requests.cpu=100m, used: requests.cpu=4, limited: requests.cpu=4"#;
    const RBAC: &str = r#"Error from server (Forbidden): error when creating "STDIN": pods is forbidden: User "alice@example.com" cannot create resource "pods" in API group "" in the namespace "shop""#;
    const TERMINATING: &str = r#"Error from server (Forbidden): error when creating "STDIN": pods "podstuck-8f14e45f-x7k2p" is forbidden: unable to create new content in namespace shop because it is being terminated"#;

    #[test]
    fn pod_security_says_the_level_and_both_ways_out() {
        let said = refusal(POD_SECURITY, "shop", "podstuck").unwrap();
        assert_eq!(
            said,
            "namespace shop's Pod Security admission (enforce level baseline) refuses the debug pod, which is privileged on the node's namespaces: run kubectl podstuck ... --namespace-for-debug podstuck (podstuck's namespace, which its install makes with Pod Security privileged) or kube-system, or have an admin allow it there: kubectl label namespace shop pod-security.kubernetes.io/enforce=privileged --overwrite"
        );
    }

    #[test]
    fn each_mechanism_is_named_with_its_fix_in_one_line() {
        let cases = [
            (SCC, "OpenShift's security context constraints", "oc adm policy add-scc-to-user privileged -z default -n shop"),
            (KYVERNO, "Kyverno's admission webhook validate.kyverno.svc-fail", "exempt podstuck's debug pods"),
            (GATEKEEPER, "Gatekeeper's admission webhook validation.gatekeeper.sh refuses the debug pod in namespace shop ([psp-privileged-container] Privileged container is not allowed", "--namespace-for-debug"),
            (QUOTA, "ResourceQuota compute has no room", "free room in shop"),
            (RBAC, "you may not create pods in namespace shop (RBAC)", "the Role podstuck-on-call-debug-pods in namespace podstuck"),
            (TERMINATING, "namespace shop is being deleted and takes no new pod", "--namespace-for-debug"),
        ];
        for (kubectl_said, what, fix) in cases {
            let said = refusal(kubectl_said, "shop", "podstuck")
                .unwrap_or_else(|| panic!("not read as a refusal: {kubectl_said}"));
            assert!(said.contains(what) && said.contains(fix), "{said}");
            assert!(!said.contains('\n'), "one line: {said}");
        }
    }

    #[test]
    fn what_is_no_refusal_is_left_to_kubectls_words() {
        assert_eq!(refusal("The connection to the server localhost:8080 was refused", "shop", "podstuck"), None);
        assert_eq!(refusal(r#"Error from server (AlreadyExists): pods "x" already exists"#, "shop", "podstuck"), None);
    }
}
