// The pod sandbox's process (the "pause" image) for the node suite (e2e/kubenode): no registry
// is reachable, so the image containerd's sandbox_image names is built here. Built by
// e2e/build-tools.
module capstan.local/e2e/tools/pause

go 1.25.0
