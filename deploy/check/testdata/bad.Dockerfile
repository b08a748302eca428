# A negative fixture for TestDockerfileChecksCatchMistakes: mixed-case
# "as", a shell-form ENTRYPOINT, a COPY --from naming a stage that does not
# exist, a RUN (and so a shell) in the final stage, USER root, and only one
# of the two ports exposed.
FROM golang:1.26 as build
WORKDIR /src
COPY . .
RUN go build -o /out/rolloutd ./cmd/rolloutd

FROM debian:bookworm-slim
COPY --from=bulid /out/rolloutd /rolloutd
RUN chmod +x /rolloutd
USER root
EXPOSE 50051
ENTRYPOINT /rolloutd
