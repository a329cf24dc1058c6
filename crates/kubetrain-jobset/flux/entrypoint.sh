#!/bin/bash
# Written by kubetrain for the Flux ML policy. The application container's entrypoint: puts the Flux view (copied
# by the flux-installer init container into /mnt/flux) on the path, encodes the resources, and starts a Flux
# broker. The lead pod runs the application under `flux run`; the others follow it. Without a command the lead
# runs an interactive broker (connect with: . /mnt/flux/flux-view.sh && flux proxy $fluxsocket bash).
fluxuser=$(whoami)
fluxuid=$(id -u "${fluxuser}")

viewbase=/mnt/flux
viewroot=${viewbase}/view
configroot=${viewbase}/config
viewbin=${viewroot}/bin
# After the image's own PATH, so that the application's tools (e.g. its Python) win.
export PATH=$PATH:${viewbin}

# The view links into /opt/software.
cp -R "${viewbase}"/software/* /opt/software/

# Flux's Python modules come from the view.
foundroot=$(find "${viewroot}" -maxdepth 2 -type d -path "${viewroot}/lib/python3*" 2>/dev/null)
pythonversion=${viewroot}/bin/$(basename "${foundroot}")
echo "Flux Python: ${pythonversion} (${foundroot})"
if [[ -f "${pythonversion}" ]]; then
  rm -rf "${viewroot}/bin/python3" "${viewroot}/bin/python"
  ln -s "${pythonversion}" "${viewroot}/lib/python" || true
  ln -s "${pythonversion}" "${viewroot}/lib/python3" || true
fi
export PYTHONPATH=${PYTHONPATH:-""}:${foundroot}/site-packages
export FLUX_RC_EXTRA=${viewroot}/etc/flux/rc1.d

# Helpers for interactive use: switch to the fluxion scheduler, and the environment of this view.
cat > "${viewbase}/load-fluxion.sh" <<'FLUXION'
flux module remove sched-simple
flux module load sched-fluxion-resource
flux module load sched-fluxion-qmanager
FLUXION
cat > "${viewbase}/flux-view.sh" <<VIEW
#!/bin/bash
export PATH=$PATH
export PYTHONPATH=$PYTHONPATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-""}:${viewroot}/lib
export fluxsocket=local://${configroot}/run/flux/local
VIEW

cfg=${configroot}/etc/flux/config
command="$@"

# The CURVE certificate must be readable by the Flux user only.
curvepath=${configroot}/etc/curve/curve.cert
cp /curve/curve.cert "${curvepath}"
chmod o-r,g-r "${curvepath}"
chown -R "${fluxuid}" "${curvepath}"

# The resource set (R) of every host.
hosts=$(cat "${configroot}/etc/flux/system/hostlist")
flux R encode --hosts="${hosts}" {{R_SPEC}} > /tmp/R
mv /tmp/R "${configroot}/etc/flux/system/R"

export STATE_DIR=${configroot}/var/lib/flux
export FLUX_OUTPUT_DIR=/tmp/fluxout
mkdir -p "${STATE_DIR}" "${FLUX_OUTPUT_DIR}" "${configroot}/etc/flux/system/cron.d"

mainHost="{{MAIN_HOST}}"
brokerOptions="-Scron.directory=${configroot}/etc/flux/system/cron.d \
  -Stbon.fanout=256 \
  -Srundir=${configroot}/run/flux \
  -Sstatedir=${STATE_DIR} -Slocal-uri=local://${configroot}/run/flux/local \
  -Slog-stderr-level=0 \
  -Slog-stderr-mode=local"

status=0
if [ "$(hostname)" = "${mainHost}" ]; then
  if [ -z "${command}" ]; then
    echo "No command given: running an interactive Flux broker"
    flux broker --config-path "${cfg}" ${brokerOptions}
    status=$?
  else
    flags="{{FLAGS}}"
    echo "flux run ${flags} ${command}"
    flux start -o --config "${cfg}" ${brokerOptions} flux run ${flags} ${command}
    status=$?
  fi
else
  # Followers retry until the lead broker is up and they exit cleanly.
  while true; do
    flux start -o --config "${cfg}" ${brokerOptions}
    retval=$?
    if [ "${retval}" -eq 0 ]; then
      echo "The follower exited cleanly."
      break
    fi
    echo "The follower exited with ${retval}; retrying in 15 s."
    sleep 15
  done
fi

touch "${viewbase}/flux-operator-complete.txt"
# Unlike upstream's script, the lead's exit status is the application's, so a failed run fails the Job.
exit ${status}
