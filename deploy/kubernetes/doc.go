// Package kubernetes holds no code: its directory holds Weir's Kubernetes
// manifests (a kustomize base and the dev and production overlays) and the
// Dockerfile of the image they run, and its tests check them offline:
// every object decodes strictly into its Kubernetes API type, every
// reference between objects resolves, and the jobmanager and taskmanager
// configs in the ConfigMap load with the binaries' own config loaders.
package kubernetes
