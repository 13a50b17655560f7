document.getElementById("map").textContent = "Map ready";
