// The sandbox ("pause") binary of the local real node's pods: built here, never pulled.
module edgetrain.local/hack/pause

go 1.26.0
