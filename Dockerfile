# Images are built from the static binaries `make build` leaves in bin/
# (CGO_ENABLED=0): nothing is pulled, nothing is compiled in the image.
FROM scratch
COPY bin/router bin/workersim bin/loadgen /
ENTRYPOINT ["/router"]
